// Package roots holds the directories the daemon indexes: each is checked
// and resolved once, and then asked which paths lie under it.
//
// A root has two spellings. Path is absolute and clean, with its symlinks
// resolved: the index stores, and prints, every path under that one.
// Given is the root as the user gave it, made absolute and clean; it
// differs from Path when it went through a symlink (annexd ~/picslink).
// A path under Given stands for the same path under Path ([Set.Canonical]),
// so a lookup by either spelling finds the file.
//
// Paths are compared as bytes, after the caller cleaned them: a path is
// under a root when it is the root or starts with the root and a slash.
package roots

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrRoot is returned when a root cannot be indexed: the message names the
// root and the fix.
var ErrRoot = errors.New("roots: bad root")

// Root is one indexed directory in its two spellings.
type Root struct {
	Path  string // absolute, clean, symlinks resolved
	Given string // absolute and clean, as given
}

// Set is a list of roots, none under another. The zero value holds none.
type Set struct{ list []Root }

// Resolve makes each of given absolute and clean, resolves its symlinks,
// and checks that it is an existing directory that no other root holds or
// lies under.
func Resolve(given []string) (Set, error) {
	if len(given) == 0 {
		return Set{}, fmt.Errorf("%w: none given; name a directory to index", ErrRoot)
	}
	var s Set
	for _, g := range given {
		r, err := resolve(g)
		if err != nil {
			return Set{}, err
		}
		for _, o := range s.list {
			if Within(r.Path, o.Path) || Within(o.Path, r.Path) {
				return Set{}, overlap(o, r)
			}
		}
		s.list = append(s.list, r)
	}
	return s, nil
}

func resolve(g string) (Root, error) {
	abs, err := filepath.Abs(g)
	if err != nil {
		return Root{}, fmt.Errorf("%w: %s: %w", ErrRoot, g, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err == nil {
		var fi fs.FileInfo
		if fi, err = os.Stat(real); err == nil && !fi.IsDir() {
			return Root{}, fmt.Errorf("%w: %s is not a directory; give the directory to index", ErrRoot, abs)
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Root{}, fmt.Errorf("%w: %s does not exist; create it, or leave it out of the roots", ErrRoot, abs)
	case err != nil:
		return Root{}, fmt.Errorf("%w: %s: %w; check the permissions of the directories on its way", ErrRoot, abs, err)
	}
	return Root{Path: real, Given: abs}, nil
}

func overlap(a, b Root) error {
	outer, inner := a, b
	if Within(a.Path, b.Path) {
		outer, inner = b, a
	}
	return fmt.Errorf("%w: %s and %s overlap; give only the outer one, %s", ErrRoot, spell(inner), spell(outer), outer.Given)
}

// spell names a root by its given spelling and, when they differ, by its
// resolved one.
func spell(r Root) string {
	if r.Given == r.Path {
		return r.Path
	}
	return r.Given + " (" + r.Path + ")"
}

// Of returns the Set of paths already resolved and checked, with aliases
// mapping another spelling of a root to its path; paths are cleaned.
func Of(paths []string, aliases map[string]string) Set {
	var s Set
	for _, p := range paths {
		p = filepath.Clean(p)
		s.list = append(s.list, Root{Path: p, Given: p})
	}
	for given, path := range aliases {
		for i := range s.list {
			if s.list[i].Path == filepath.Clean(path) {
				s.list[i].Given = filepath.Clean(given)
			}
		}
	}
	return s
}

// Roots returns the roots in the order given.
func (s Set) Roots() []Root { return append([]Root(nil), s.list...) }

// Paths returns the roots' resolved paths in the order given.
func (s Set) Paths() []string {
	out := make([]string, len(s.list))
	for i, r := range s.list {
		out[i] = r.Path
	}
	return out
}

// Aliases maps each given spelling that differs from its root's path to
// that path; nil when there is none.
func (s Set) Aliases() map[string]string {
	var m map[string]string
	for _, r := range s.list {
		if r.Given != r.Path {
			if m == nil {
				m = make(map[string]string)
			}
			m[r.Given] = r.Path
		}
	}
	return m
}

// Contains reports whether p is a root's path or under one.
func (s Set) Contains(p string) bool {
	_, ok := s.RootOf(p)
	return ok
}

// IsRoot reports whether p is a root's path.
func (s Set) IsRoot(p string) bool {
	for _, r := range s.list {
		if r.Path == p {
			return true
		}
	}
	return false
}

// RootOf returns the path of the root p is at or under.
func (s Set) RootOf(p string) (string, bool) {
	for _, r := range s.list {
		if Within(p, r.Path) {
			return r.Path, true
		}
	}
	return "", false
}

// Rel returns p relative to its root ("" for the root itself) and the
// root's path.
func (s Set) Rel(p string) (rel, root string, ok bool) {
	root, ok = s.RootOf(p)
	if !ok {
		return "", "", false
	}
	return Rel(p, root), root, true
}

// Canonical returns p spelled under its root's path: p itself when it is
// under a root's path, the same place under the path when it is under a
// root's given spelling. The longest spelling that holds p wins. It
// reports false when p is under no root.
func (s Set) Canonical(p string) (string, bool) {
	best, out := -1, ""
	for _, r := range s.list {
		for _, sp := range [2]string{r.Path, r.Given} {
			if len(sp) > best && Within(p, sp) {
				best, out = len(sp), join(r.Path, Rel(p, sp))
			}
		}
	}
	return out, best >= 0
}

// Holding returns the paths of the roots at or under dir.
func (s Set) Holding(dir string) []string {
	var out []string
	for _, r := range s.list {
		if Within(r.Path, dir) {
			out = append(out, r.Path)
		}
	}
	return out
}

// String lists the roots' paths, for messages.
func (s Set) String() string { return strings.Join(s.Paths(), ", ") }

// Within reports whether the clean path p is dir or under it.
func Within(p, dir string) bool {
	return p == dir || dir == "/" || (len(p) > len(dir) && p[len(dir)] == '/' && p[:len(dir)] == dir)
}

// Rel returns p relative to dir, which holds it ("" for dir itself).
func Rel(p, dir string) string {
	switch {
	case p == dir:
		return ""
	case dir == "/":
		return p[1:]
	}
	return p[len(dir)+1:]
}

func join(dir, rel string) string {
	if rel == "" {
		return dir
	}
	if dir == "/" {
		return "/" + rel
	}
	return dir + "/" + rel
}
