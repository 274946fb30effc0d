package roots

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestWithinAndRel(t *testing.T) {
	for _, c := range []struct {
		p, dir string
		want   bool
		rel    string
	}{
		{"/a/b", "/a/b", true, ""},
		{"/a/b/c", "/a/b", true, "c"},
		{"/a/b/c/d", "/a/b", true, "c/d"},
		{"/a/bc", "/a/b", false, ""},
		{"/a", "/a/b", false, ""},
		{"/a/b", "/", true, "a/b"},
		{"/", "/", true, ""},
		{"/ab", "/a", false, ""},
		{"/a/\xff", "/a", true, "\xff"},
	} {
		if got := Within(c.p, c.dir); got != c.want {
			t.Errorf("Within(%q, %q) = %v, want %v", c.p, c.dir, got, c.want)
		}
		if c.want {
			if got := Rel(c.p, c.dir); got != c.rel {
				t.Errorf("Rel(%q, %q) = %q, want %q", c.p, c.dir, got, c.rel)
			}
		}
	}
}

// tree makes real/sub, a file, and link → real under a temporary directory.
func tree(t *testing.T) (base, real, link string) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	real, link = filepath.Join(base, "real"), filepath.Join(base, "link")
	if err := os.MkdirAll(filepath.Join(real, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	return base, real, link
}

func TestResolveRejects(t *testing.T) {
	base, real, link := tree(t)
	other := filepath.Join(base, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		given []string
		want  []string // in the message
	}{
		{"none", nil, []string{"none given"}},
		{"missing", []string{filepath.Join(base, "nope")}, []string{filepath.Join(base, "nope"), "does not exist", "create it"}},
		{"a file", []string{filepath.Join(base, "file")}, []string{filepath.Join(base, "file"), "not a directory"}},
		{"twice", []string{real, real + "/sub/.."}, []string{real, "overlap", "only the outer one"}},
		{"nested", []string{filepath.Join(real, "sub"), real}, []string{filepath.Join(real, "sub"), "overlap", "outer one, " + real}},
		{"through a symlink", []string{link, filepath.Join(real, "sub")}, []string{link + " (" + real + ")", "overlap"}},
		{"one bad among good", []string{other, filepath.Join(base, "nope")}, []string{"nope", "does not exist"}},
	} {
		_, err := Resolve(c.given)
		if !errors.Is(err, ErrRoot) {
			t.Errorf("%s: err = %v, want ErrRoot", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
	}
}

func TestResolveSymlinkedRoot(t *testing.T) {
	base, real, link := tree(t)
	other := filepath.Join(base, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Resolve([]string{link, other + "/"})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Paths(); !slices.Equal(got, []string{real, other}) {
		t.Errorf("Paths() = %q, want the resolved %q", got, []string{real, other})
	}
	if got := s.Aliases(); len(got) != 1 || got[link] != real {
		t.Errorf("Aliases() = %v, want %s → %s", got, link, real)
	}
	for _, c := range []struct {
		p, want string
		ok      bool
	}{
		{filepath.Join(real, "sub/f"), filepath.Join(real, "sub/f"), true},
		{filepath.Join(link, "sub/f"), filepath.Join(real, "sub/f"), true},
		{link, real, true},
		{filepath.Join(other, "x"), filepath.Join(other, "x"), true},
		{filepath.Join(base, "linkx/f"), "", false},
		{base, "", false},
	} {
		got, ok := s.Canonical(c.p)
		if got != c.want || ok != c.ok {
			t.Errorf("Canonical(%s) = %q, %v; want %q, %v", c.p, got, ok, c.want, c.ok)
		}
	}
	// Containment is by the stored spelling alone.
	if s.Contains(filepath.Join(link, "sub")) || !s.Contains(filepath.Join(real, "sub")) {
		t.Error("Contains answers by the given spelling")
	}
	if s2 := Of(s.Paths(), s.Aliases()); !slices.Equal(s2.Roots(), s.Roots()) {
		t.Errorf("Of(Paths, Aliases) = %v, want %v", s2.Roots(), s.Roots())
	}
}

// The longest spelling that holds a path decides where it is: a root's
// alias that lies inside another root.
func TestCanonicalLongestSpelling(t *testing.T) {
	s := Of([]string{"/a", "/b"}, map[string]string{"/a/link": "/b"})
	for p, want := range map[string]string{"/a/link/f": "/b/f", "/a/linkx": "/a/linkx", "/a/f": "/a/f", "/b/f": "/b/f"} {
		if got, ok := s.Canonical(p); !ok || got != want {
			t.Errorf("Canonical(%s) = %q, %v; want %q", p, got, ok, want)
		}
	}
}

func TestSetQueries(t *testing.T) {
	s := Of([]string{"/home/u/", "/srv/data", "/mnt/x"}, nil)
	if got := s.Paths(); !slices.Equal(got, []string{"/home/u", "/srv/data", "/mnt/x"}) {
		t.Errorf("Paths() = %q: not cleaned", got)
	}
	for _, c := range []struct {
		p         string
		root, rel string
		ok, isRoo bool
	}{
		{"/home/u", "/home/u", "", true, true},
		{"/home/u/a/b", "/home/u", "a/b", true, false},
		{"/home/uu", "", "", false, false},
		{"/srv", "", "", false, false},
		{"/srv/data/x", "/srv/data", "x", true, false},
	} {
		rel, root, ok := s.Rel(c.p)
		if rel != c.rel || root != c.root || ok != c.ok {
			t.Errorf("Rel(%s) = %q, %q, %v; want %q, %q, %v", c.p, rel, root, ok, c.rel, c.root, c.ok)
		}
		if s.Contains(c.p) != c.ok || s.IsRoot(c.p) != c.isRoo {
			t.Errorf("%s: Contains %v IsRoot %v", c.p, s.Contains(c.p), s.IsRoot(c.p))
		}
	}
	if got := s.Holding("/home"); !slices.Equal(got, []string{"/home/u"}) {
		t.Errorf("Holding(/home) = %q", got)
	}
	if got := s.Holding("/"); len(got) != 3 {
		t.Errorf("Holding(/) = %q", got)
	}
	if got := s.Holding("/home/u/a"); got != nil {
		t.Errorf("Holding(/home/u/a) = %q: a directory under a root holds none", got)
	}
	if s.String() != "/home/u, /srv/data, /mnt/x" {
		t.Errorf("String() = %q", s.String())
	}
	var zero Set
	if zero.Contains("/") || zero.Aliases() != nil {
		t.Error("the zero Set holds something")
	}
}
