// Package ignore decides which paths under a watched root are left out of the
// index, using gitignore-style patterns matched against root-relative paths.
//
// # Patterns
//
// One pattern per line, as in .gitignore:
//
//   - blank lines and lines starting with '#' are skipped ("\#" is a literal '#');
//     trailing spaces are trimmed unless escaped with '\';
//   - '!' negates: a path matched by an earlier pattern is included again
//     ("\!" is a literal '!'); the last matching pattern decides;
//   - a trailing '/' matches directories only;
//   - a pattern containing '/' at the start or in the middle is anchored to the
//     root ("/build" matches only the top-level build); otherwise it matches
//     the name at any depth ("*.o" matches a/b/c.o);
//   - '*' matches any run of bytes except '/', '?' matches one character
//     except '/' (one UTF-8 character, or one byte of a non-UTF-8 name),
//     '[...]' matches one character from a set ('[a-z]', '[!0-9]', '[^x]');
//   - '**' as a whole path component matches zero or more components:
//     "**/foo", "foo/**", "a/**/b".
//
// Paths are root-relative, '/'-separated, without a leading '/', and are
// matched as bytes, so names that are not valid UTF-8 work.
//
// As in git, a path inside an excluded directory cannot be included again by
// a negation: walkers do not descend into excluded directories at all.
//
// # Defaults
//
// [Defaults] leaves out only what is never a person's data: version-control
// internals (.git/, .hg/, .svn/, .bzr/, _darcs/), caches (.cache/,
// __pycache__/), desktop trash folders (.Trash/, .Trash-*/) and fsck's
// lost+found/. Files inside a git work tree are indexed; the .git directory
// itself is not (this includes git-annex's .git/annex/objects, whose keys
// git-annex already records; DefaultsWithAnnexObjects walks it too). Build outputs, node_modules, editor backups and
// temporary files are indexed unless the user says otherwise: leaving out a
// file the user cares about silently would make lookups say "unknown" for
// real data.
package ignore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// ErrBadPattern is returned by New for a pattern that cannot be parsed.
var ErrBadPattern = errors.New("ignore: bad pattern")

// Defaults returns the default patterns (see the package documentation).
func Defaults() []string {
	return []string{
		".git/",
		".hg/",
		".svn/",
		".bzr/",
		"_darcs/",
		".cache/",
		"__pycache__/",
		".Trash/",
		".Trash-*/",
		"lost+found/",
	}
}

// annexObjects keeps git-annex's object store and nothing else of a .git
// directory: each rule re-includes one level below the one before.
var annexObjects = []string{"**/.git/*", "!**/.git/annex/", "**/.git/annex/*", "!**/.git/annex/objects/"}

// DefaultsWithAnnexObjects is Defaults with git-annex's object store
// indexed too: of a .git directory only .git/annex/objects is walked, so
// whereis finds the annexed copies of a file's content.
func DefaultsWithAnnexObjects() []string {
	d := Defaults()
	i := slices.Index(d, ".git/")
	return slices.Insert(slices.Delete(d, i, i+1), i, annexObjects...)
}

// Matcher holds compiled patterns. A nil *Matcher excludes nothing.
// A Matcher is immutable and safe for concurrent use.
type Matcher struct {
	rules []rule
	// fileRules is true when some rule can match a non-directory, so callers
	// on a hot path can skip matching regular files otherwise.
	fileRules bool
}

type rule struct {
	text     string   // the pattern as given, for errors and debugging
	segs     []string // '/'-separated components; "**" is a component
	negate   bool
	dirOnly  bool
	anchored bool // matched against the whole path, not the base name
}

// New compiles patterns; each element is one line in .gitignore syntax.
// Comments and blank lines are skipped.
func New(patterns []string) (*Matcher, error) {
	m := &Matcher{}
	for _, p := range patterns {
		r, ok, err := parse(p)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		m.rules = append(m.rules, r)
		if !r.dirOnly {
			m.fileRules = true
		}
	}
	return m, nil
}

// MustNew is New for patterns known to be valid; it panics on error.
func MustNew(patterns []string) *Matcher {
	m, err := New(patterns)
	if err != nil {
		panic(err)
	}
	return m
}

// Patterns returns the number of active patterns.
func (m *Matcher) Patterns() int {
	if m == nil {
		return 0
	}
	return len(m.rules)
}

func parse(line string) (rule, bool, error) {
	p := strings.TrimSuffix(line, "\r")
	p = trimTrailingSpaces(p)
	if p == "" || p[0] == '#' {
		return rule{}, false, nil
	}
	r := rule{text: line}
	switch {
	case p[0] == '!':
		r.negate = true
		p = p[1:]
	case strings.HasPrefix(p, `\!`), strings.HasPrefix(p, `\#`):
		p = p[1:]
	}
	if strings.HasSuffix(p, "/") {
		r.dirOnly = true
		p = strings.TrimRight(p, "/")
	}
	if strings.HasPrefix(p, "/") {
		r.anchored = true
		p = strings.TrimLeft(p, "/")
	}
	if p == "" {
		return rule{}, false, fmt.Errorf("%w %q: matches nothing", ErrBadPattern, line)
	}
	if strings.Contains(p, "/") {
		r.anchored = true
	}
	r.segs = strings.Split(p, "/")
	if n := len(r.segs); n > 1 && r.segs[n-1] == "**" {
		// "foo/**" matches what is inside foo, not foo itself.
		r.segs = append(r.segs[:n-1], "*", "**")
	}
	for _, s := range r.segs {
		if s == "" {
			return rule{}, false, fmt.Errorf("%w %q: empty path component", ErrBadPattern, line)
		}
		if err := checkGlob(s); err != nil {
			return rule{}, false, fmt.Errorf("%w %q: %v", ErrBadPattern, line, err)
		}
	}
	return r, true, nil
}

// trimTrailingSpaces removes unescaped trailing spaces.
func trimTrailingSpaces(p string) string {
	for strings.HasSuffix(p, " ") && !strings.HasSuffix(p, `\ `) {
		p = p[:len(p)-1]
	}
	return p
}

// checkGlob reports unterminated classes and dangling escapes.
func checkGlob(s string) error {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 >= len(s) {
				return errors.New("trailing backslash")
			}
			i++
		case '[':
			end := classEnd(s, i)
			if end < 0 {
				return errors.New("unterminated [")
			}
			i = end
		}
	}
	return nil
}

// Match reports whether the root-relative path rel is excluded. isDir says
// whether rel names a directory (directory-only patterns need it). The empty
// path (the root itself) is never excluded.
func (m *Matcher) Match(rel string, isDir bool) bool {
	if m == nil || rel == "" || (!isDir && !m.fileRules) {
		return false
	}
	rel = strings.Trim(rel, "/")
	excluded := false
	for i := len(m.rules) - 1; i >= 0; i-- {
		r := &m.rules[i]
		if r.dirOnly && !isDir {
			continue
		}
		if r.match(rel) {
			excluded = !r.negate
			break
		}
	}
	return excluded
}

// MatchPath reports whether rel is excluded itself or lies inside an
// excluded directory: what a walker that does not enter excluded directories
// would conclude. Use it for single paths (a lookup, an event), not inside a
// walk, where Match on each entry suffices.
func (m *Matcher) MatchPath(rel string, isDir bool) bool {
	if m == nil || len(m.rules) == 0 {
		return false
	}
	rel = strings.Trim(rel, "/")
	for i := 0; i < len(rel); i++ {
		if rel[i] == '/' && m.Match(rel[:i], true) {
			return true
		}
	}
	return m.Match(rel, isDir)
}

func (r *rule) match(rel string) bool {
	if !r.anchored {
		base := rel
		if i := strings.LastIndexByte(rel, '/'); i >= 0 {
			base = rel[i+1:]
		}
		return glob(r.segs[0], base)
	}
	return matchSegs(r.segs, strings.Split(rel, "/"))
}

// matchSegs matches pattern components against path components; "**"
// matches zero or more components. Like glob, it backtracks only to the
// last "**", so it runs in time linear in len(pat)*len(path).
func matchSegs(pat, path []string) bool {
	px, nx := 0, 0
	nextPx, nextNx := -1, -1
	for px < len(pat) || nx < len(path) {
		if px < len(pat) {
			if pat[px] == "**" {
				nextPx, nextNx = px, nx+1
				px++
				continue
			}
			if nx < len(path) && glob(pat[px], path[nx]) {
				px++
				nx++
				continue
			}
		}
		if nextNx > 0 && nextNx <= len(path) {
			px, nx = nextPx, nextNx
			continue
		}
		return false
	}
	return true
}

// glob matches one path component against one pattern component. It
// backtracks only to the last '*', so it runs in time linear in
// len(pat)*len(name).
func glob(pat, name string) bool {
	px, nx := 0, 0
	nextPx, nextNx := -1, -1
	for px < len(pat) || nx < len(name) {
		if px < len(pat) {
			switch c := pat[px]; c {
			case '*':
				nextPx, nextNx = px, nx+1
				px++
				continue
			case '?':
				if nx < len(name) {
					px++
					nx += charLen(name[nx:])
					continue
				}
			case '[':
				end := px + classEnd(pat[px:], 0)
				if nx < len(name) {
					n := charLen(name[nx:])
					if matchClass(pat[px+1:end], name[nx:nx+n]) {
						px, nx = end+1, nx+n
						continue
					}
				}
			case '\\':
				if nx < len(name) && px+1 < len(pat) && name[nx] == pat[px+1] {
					px, nx = px+2, nx+1
					continue
				}
			default:
				if nx < len(name) && name[nx] == c {
					px++
					nx++
					continue
				}
			}
		}
		if nextNx > 0 && nextNx <= len(name) {
			px, nx = nextPx, nextNx
			continue
		}
		return false
	}
	return true
}

// charLen is the length of the first character of s: one UTF-8 sequence, or
// one byte when s does not start with valid UTF-8.
func charLen(s string) int {
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && n <= 1 {
		return 1
	}
	return n
}

// classEnd returns the index of the ']' closing the class opened at s[i],
// or -1. A ']' right after '[' or '[!' / '[^' is literal.
func classEnd(s string, i int) int {
	j := i + 1
	if j < len(s) && (s[j] == '!' || s[j] == '^') {
		j++
	}
	if j < len(s) && s[j] == ']' {
		j++
	}
	for ; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case ']':
			return j
		}
	}
	return -1
}

// matchClass matches one character c (a UTF-8 sequence or one byte) against
// the class body (between '[' and ']').
func matchClass(body, c string) bool {
	negate := false
	if body != "" && (body[0] == '!' || body[0] == '^') {
		negate = true
		body = body[1:]
	}
	want := decode(c)
	found := false
	for body != "" {
		lo, n := classChar(body)
		body = body[n:]
		hi := lo
		if len(body) >= 2 && body[0] == '-' {
			hi, n = classChar(body[1:])
			body = body[1+n:]
		}
		if lo <= want && want <= hi {
			found = true
		}
	}
	return found != negate
}

// classChar decodes one class member, honouring '\' escapes.
func classChar(s string) (rune, int) {
	if s[0] == '\\' && len(s) > 1 {
		n := charLen(s[1:])
		return decode(s[1 : 1+n]), 1 + n
	}
	n := charLen(s)
	return decode(s[:n]), n
}

// decode maps a character to a rune; a lone invalid byte b maps to a value
// above the Unicode range so it only ever equals itself.
func decode(c string) rune {
	r, n := utf8.DecodeRuneInString(c)
	if r == utf8.RuneError && n <= 1 {
		return utf8.MaxRune + 1 + rune(c[0])
	}
	return r
}
