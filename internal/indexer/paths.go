package indexer

import (
	"path/filepath"
	"strings"

	"github.com/annexd/annexd/internal/ignore"
)

// ignoreRules holds the ignore patterns matched relative to a root: the full
// set, and the subset that does not depend on where the root is (patterns
// without a '/' other than a trailing one), which is safe to hand to a walk
// of a subdirectory.
type ignoreRules struct {
	full, loose *ignore.Matcher
}

func newIgnoreRules(patterns []string) (ignoreRules, error) {
	full, err := ignore.New(patterns)
	if err != nil {
		return ignoreRules{}, err
	}
	var loose []string
	for _, p := range patterns {
		if !strings.Contains(strings.TrimSuffix(p, "/"), "/") {
			loose = append(loose, p)
		}
	}
	lm, err := ignore.New(loose)
	if err != nil {
		return ignoreRules{}, err
	}
	return ignoreRules{full: full, loose: lm}, nil
}

// rootOf returns the root path is under, or "".
func (ix *Indexer) rootOf(path string) string {
	for _, r := range ix.opt.Roots {
		if within(path, r) {
			return r
		}
	}
	return ""
}

// relTo returns path relative to root ("" for the root itself).
func relTo(path, root string) string {
	switch {
	case path == root:
		return ""
	case root == "/":
		return path[1:]
	}
	return path[len(root)+1:]
}

// ignoreFor returns the matcher for a walk of dir: the full one for a root,
// the position-independent subset for a subdirectory (its files are then
// checked with ignoredUnder).
func (ix *Indexer) ignoreFor(dir string) *ignore.Matcher {
	if ix.isRoot(dir) {
		return ix.ign.full
	}
	return ix.ign.loose
}

// ignored reports whether path, or a directory between its root and it, is
// left out by the ignore patterns.
func (ix *Indexer) ignored(path string, isDir bool) bool {
	root := ix.rootOf(path)
	if root == "" || ix.ign.full.Patterns() == 0 {
		return false
	}
	rel := relTo(path, root)
	if rel == "" {
		return false
	}
	if ix.ign.full.Match(rel, isDir) {
		return true
	}
	for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
		if ix.ign.full.Match(d, true) {
			return true
		}
	}
	return false
}

// excluded reports whether path is under one of Options.Exclude.
func (ix *Indexer) excluded(path string) bool {
	for _, x := range ix.opt.Exclude {
		if within(path, x) {
			return true
		}
	}
	return false
}
