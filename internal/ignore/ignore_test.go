package ignore

import (
	"errors"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		patterns []string
		path     string
		dir      bool
		want     bool
	}{
		// basename patterns match at any depth
		{[]string{"*.o"}, "a.o", false, true},
		{[]string{"*.o"}, "x/y/a.o", false, true},
		{[]string{"*.o"}, "a.oo", false, false},
		{[]string{"*.o"}, "dir.o/file", false, false}, // walkers never enter dir.o
		{[]string{"foo"}, "a/foo", true, true},
		{[]string{"foo"}, "a/foo", false, true},
		// directory-only
		{[]string{"build/"}, "build", true, true},
		{[]string{"build/"}, "build", false, false},
		{[]string{"build/"}, "x/build", true, true},
		// anchoring
		{[]string{"/build"}, "build", true, true},
		{[]string{"/build"}, "x/build", true, false},
		{[]string{"doc/frotz"}, "doc/frotz", false, true},
		{[]string{"doc/frotz"}, "a/doc/frotz", false, false},
		{[]string{"doc/*.txt"}, "doc/a.txt", false, true},
		{[]string{"doc/*.txt"}, "doc/x/a.txt", false, false},
		// **
		{[]string{"**/foo"}, "foo", false, true},
		{[]string{"**/foo"}, "a/b/foo", false, true},
		{[]string{"a/**/b"}, "a/b", false, true},
		{[]string{"a/**/b"}, "a/x/y/b", false, true},
		{[]string{"a/**/b"}, "a/x/y/c", false, false},
		{[]string{"abc/**"}, "abc/x", false, true},
		{[]string{"abc/**"}, "abc/x/y", false, true},
		{[]string{"abc/**"}, "abc", true, false},
		// ? and classes
		{[]string{"?.c"}, "a.c", false, true},
		{[]string{"?.c"}, "ab.c", false, false},
		{[]string{"?.c"}, "é.c", false, true}, // one UTF-8 character
		{[]string{"[abc].c"}, "b.c", false, true},
		{[]string{"[abc].c"}, "d.c", false, false},
		{[]string{"[a-c].c"}, "c.c", false, true},
		{[]string{"[!a-c].c"}, "c.c", false, false},
		{[]string{"[^a-c].c"}, "d.c", false, true},
		{[]string{"[]].c"}, "].c", false, true},
		// negation, last match wins
		{[]string{"*.log", "!keep.log"}, "keep.log", false, false},
		{[]string{"*.log", "!keep.log"}, "other.log", false, true},
		{[]string{"!keep.log", "*.log"}, "keep.log", false, true},
		// escapes, comments, trailing spaces
		{[]string{`\#x`}, "#x", false, true},
		{[]string{"#x"}, "#x", false, false},
		{[]string{`\!x`}, "!x", false, true},
		{[]string{"a  "}, "a", false, true},
		{[]string{`a\ `}, "a ", false, true},
		{[]string{`\*`}, "*", false, true},
		{[]string{`\*`}, "x", false, false},
		// bytes that are not UTF-8
		{[]string{"caf\xe9"}, "caf\xe9", false, true},
		{[]string{"caf?"}, "caf\xe9", false, true},
		{[]string{"*\xff*"}, "a\xffb", false, true},
		{[]string{"[\xfe\xff]"}, "\xff", false, true},
		{[]string{"[\xfe\xff]"}, "\xfd", false, false},
		// no exponential backtracking
		{[]string{"*a*a*a*a*a*a*a*a*a*b"}, strings.Repeat("a", 200), false, false},
		{[]string{"**/a/**/a/**/a/**/a/**/b"}, strings.Repeat("a/", 100) + "c", false, false},
		{[]string{"a/**/**/b"}, "a/b", false, true},
		// the root is never excluded
		{[]string{"*"}, "", true, false},
	}
	for _, c := range cases {
		m, err := New(c.patterns)
		if err != nil {
			t.Fatalf("%q: %v", c.patterns, err)
		}
		if got := m.Match(c.path, c.dir); got != c.want {
			t.Errorf("%q Match(%q, dir=%v) = %v, want %v", c.patterns, c.path, c.dir, got, c.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	m := MustNew(Defaults())
	excluded := []string{".git", "a/b/.git", ".hg", ".svn", ".cache", "x/__pycache__", ".Trash-1000", ".Trash", "lost+found"}
	for _, p := range excluded {
		if !m.Match(p, true) {
			t.Errorf("default does not exclude dir %q", p)
		}
	}
	kept := []string{".gitignore", ".git", "node_modules", "a.tmp", "a~", "build", ".cache"}
	for _, p := range kept {
		if m.Match(p, false) {
			t.Errorf("default excludes file %q", p)
		}
	}
	for _, p := range []string{"node_modules", "build", ".config", "Trash"} {
		if m.Match(p, true) {
			t.Errorf("default excludes dir %q", p)
		}
	}
}

// TestDefaultsWithAnnexObjects: only .git/annex/objects of a .git
// directory is walked; the rest of the defaults stay.
func TestDefaultsWithAnnexObjects(t *testing.T) {
	m := MustNew(DefaultsWithAnnexObjects())
	walked := []struct {
		path string
		dir  bool
	}{
		{"r/.git/annex/objects/Xx/Yy/SHA256E-s1--ab.jpg/SHA256E-s1--ab.jpg", false},
		{".git/annex/objects/Xx", true}, {"a/b/.git/annex/objects", true},
	}
	for _, w := range walked {
		if m.MatchPath(w.path, w.dir) {
			t.Errorf("%q is left out, want it walked", w.path)
		}
	}
	left := []string{".git/config", "r/.git/objects/ab/cdef", "r/.git/annex/tmp/x", "r/.git/annex/journal",
		"x/.cache/y", ".hg/store"}
	for _, p := range left {
		if !m.MatchPath(p, false) {
			t.Errorf("%q is walked, want it left out", p)
		}
	}
	if m.MatchPath("r/.git", true) || m.MatchPath("r/.git/annex", true) {
		t.Error("the directories on the way to the objects are left out")
	}
}

func TestMatchPath(t *testing.T) {
	m := MustNew([]string{".git/", "/build/", "*.o", "!keep.o"})
	cases := []struct {
		path string
		dir  bool
		want bool
	}{
		{".git/objects/ab/cdef", false, true},
		{"src/.git/HEAD", false, true},
		{"build/x/y", false, true},
		{"src/build/x", false, false},
		{"a.o", false, true},
		{"x/keep.o", false, false},
		{"src/main.go", false, false},
		{".gitignore", false, false},
	}
	for _, c := range cases {
		if got := m.MatchPath(c.path, c.dir); got != c.want {
			t.Errorf("MatchPath(%q) = %v, want %v", c.path, got, c.want)
		}
	}
}

func TestBadPatterns(t *testing.T) {
	for _, p := range []string{"[abc", "a//b", "/", "x\\", "!/"} {
		if _, err := New([]string{p}); !errors.Is(err, ErrBadPattern) {
			t.Errorf("%q: err %v", p, err)
		}
	}
	var nilM *Matcher
	if nilM.Match("a", false) || nilM.Patterns() != 0 {
		t.Error("nil matcher excludes")
	}
	m := MustNew([]string{"# comment", "", "   ", "x"})
	if m.Patterns() != 1 {
		t.Errorf("patterns = %d", m.Patterns())
	}
}

func FuzzMatch(f *testing.F) {
	f.Add("a/**/b", "a/x/b", true)
	f.Add("[!a-", "x", false)
	f.Fuzz(func(t *testing.T, pat, path string, dir bool) {
		m, err := New([]string{pat})
		if err != nil {
			return
		}
		m.Match(path, dir) // must not panic or hang
	})
}
