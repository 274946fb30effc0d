package indexer

import (
	"path/filepath"
	"strings"

	"github.com/annexd/annexd/internal/ignore"
	"github.com/annexd/annexd/internal/roots"
)

// pathRules says which paths the indexer records: those under a root that
// are neither excluded nor ignored.
type pathRules struct {
	roots   roots.Set
	exclude []string // never indexed, with everything under them
	// full holds the ignore patterns, matched relative to a root; loose
	// the subset that does not depend on where the root is (patterns
	// without a '/' other than a trailing one), safe to hand to a walk of
	// a subdirectory.
	full, loose *ignore.Matcher
}

func newPathRules(rootPaths, exclude, patterns []string) (*pathRules, error) {
	full, err := ignore.New(patterns)
	if err != nil {
		return nil, err
	}
	var loose []string
	for _, p := range patterns {
		if !strings.Contains(strings.TrimSuffix(p, "/"), "/") {
			loose = append(loose, p)
		}
	}
	lm, err := ignore.New(loose)
	if err != nil {
		return nil, err
	}
	return &pathRules{roots: roots.Of(rootPaths, nil), exclude: exclude, full: full, loose: lm}, nil
}

// skip reports files the indexer never records: outside the roots,
// excluded, or ignored.
func (r *pathRules) skip(path string) bool {
	return !r.roots.Contains(path) || r.excluded(path) || r.ignored(path, false)
}

// skipDir is skip for a directory.
func (r *pathRules) skipDir(path string) bool {
	return !r.roots.Contains(path) || r.excluded(path) || r.ignored(path, true)
}

// excluded reports whether path is at or under one of Options.Exclude.
func (r *pathRules) excluded(path string) bool {
	for _, x := range r.exclude {
		if roots.Within(path, x) {
			return true
		}
	}
	return false
}

// ignoreFor returns the matcher for a walk of dir: the full one for a root,
// the position-independent subset for a subdirectory (its files are then
// checked with ignored).
func (r *pathRules) ignoreFor(dir string) *ignore.Matcher {
	if r.roots.IsRoot(dir) {
		return r.full
	}
	return r.loose
}

// ignored reports whether path, or a directory between its root and it, is
// left out by the ignore patterns.
func (r *pathRules) ignored(path string, isDir bool) bool {
	if r.full.Patterns() == 0 {
		return false
	}
	rel, _, ok := r.roots.Rel(path)
	if !ok || rel == "" {
		return false
	}
	if r.full.Match(rel, isDir) {
		return true
	}
	for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
		if r.full.Match(d, true) {
			return true
		}
	}
	return false
}
