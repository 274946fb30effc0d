package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPublicAPIHidesInternal fails when a public package (key, store,
// watcher, …) names a type from an internal/ package in an exported
// declaration: a caller outside the module could not use it.
func TestPublicAPIHidesInternal(t *testing.T) {
	root, _ := filepath.Abs("../..")
	checked := 0
	for pkg := range packages(t) {
		if strings.HasPrefix(pkg, "internal/") || strings.HasPrefix(pkg, "cmd/") || strings.HasPrefix(pkg, "bench/") {
			continue
		}
		checked++
		fset := token.NewFileSet()
		names, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, bad := range internalUses(f) {
				t.Errorf("%s: exported %s names %s, an internal package's type", fset.Position(bad.pos), bad.decl, bad.what)
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked only %d public packages", checked)
	}
}

type use struct {
	pos        token.Pos
	decl, what string
}

// internalUses lists the selectors of internal packages in the exported
// declarations of f: exported types (their fields and methods included),
// functions, and the types of exported variables and constants.
func internalUses(f *ast.File) []use {
	internal := map[string]string{} // local name → import path
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		if !strings.Contains(path, "/internal/") {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		internal[name] = path
	}
	if len(internal) == 0 {
		return nil
	}
	var out []use
	scan := func(decl string, n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BlockStmt:
				return false // bodies are not API
			case *ast.Field:
				if len(n.Names) > 0 && !n.Names[0].IsExported() {
					return false // an unexported field
				}
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && internal[id.Name] != "" {
					out = append(out, use{n.Pos(), decl, internal[id.Name] + "." + n.Sel.Name})
				}
			}
			return true
		})
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() && (d.Recv == nil || exportedRecv(d.Recv)) {
				scan(d.Name.Name, d.Type)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						scan(s.Name.Name, s.Type)
					}
				case *ast.ValueSpec:
					if len(s.Names) > 0 && s.Names[0].IsExported() && s.Type != nil {
						scan(s.Names[0].Name, s.Type)
					}
				}
			}
		}
	}
	return out
}

func exportedRecv(fl *ast.FieldList) bool {
	t := fl.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}
