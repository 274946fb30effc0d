package dedup

import (
	"errors"
	"testing"

	"github.com/annexd/annexd/store"
)

func TestParseKeep(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Keep
	}{
		{"", Keep{}},
		{"newest", Keep{Rule: KeepNewest}},
		{"oldest", Keep{Rule: KeepOldest}},
		{"shortest-path", Keep{Rule: KeepShortest}},
		{"under=/home/u/Photos/", Keep{Rule: KeepUnder, Dir: []byte("/home/u/Photos")}},
	} {
		got, err := ParseKeep(c.in)
		if err != nil || got.Rule != c.want.Rule || string(got.Dir) != string(c.want.Dir) {
			t.Errorf("ParseKeep(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if c.in != "" && c.want.Rule != KeepUnder && got.String() != c.in {
			t.Errorf("%q.String() = %q", c.in, got.String())
		}
	}
	for _, bad := range []string{"latest", "under=", "under=rel/dir", "Newest"} {
		if _, err := ParseKeep(bad); !errors.Is(err, ErrKeep) {
			t.Errorf("ParseKeep(%q) = %v, want ErrKeep", bad, err)
		}
	}
}

// TestKeepRules plans one group of three copies (and, where it matters,
// a hard-linked pair) under each rule and each mode.
func TestKeepRules(t *testing.T) {
	copies := func() []store.Member {
		return []store.Member{
			m("/r/b/old.jpg", 1, 10, 100),
			m("/r/a/deep/er/mid.jpg", 1, 11, 200),
			m("/r/new.jpg", 1, 12, 300),
		}
	}
	for _, c := range []struct {
		keep string
		mode Mode
		want string
	}{
		{"", Reflink, "/r/b/old.jpg <- /r/a/deep/er/mid.jpg,/r/new.jpg"},
		{"newest", Reflink, "/r/new.jpg <- /r/a/deep/er/mid.jpg,/r/b/old.jpg"},
		{"newest", Hardlink, "/r/new.jpg <- /r/a/deep/er/mid.jpg,/r/b/old.jpg"},
		{"newest", Trash, "/r/new.jpg <- /r/a/deep/er/mid.jpg,/r/b/old.jpg"},
		{"oldest", Trash, "/r/b/old.jpg <- /r/a/deep/er/mid.jpg,/r/new.jpg"},
		{"shortest-path", Trash, "/r/new.jpg <- /r/b/old.jpg,/r/a/deep/er/mid.jpg"},
		{"under=/r/a", Trash, "/r/a/deep/er/mid.jpg <- /r/b/old.jpg,/r/new.jpg"},
		{"under=/r/a", Reflink, "/r/a/deep/er/mid.jpg <- /r/b/old.jpg,/r/new.jpg"},
		{"under=/r/zz", Trash, ""}, // no copy there: the group is left alone
	} {
		k, err := ParseKeep(c.keep)
		if err != nil {
			t.Fatal(err)
		}
		p := MakePlan([]store.Group{group(100, copies()...)}, PlanOptions{Mode: c.mode, Keep: k})
		if got := describe(p); got != c.want {
			t.Errorf("keep %q, %s: %s; want %s", c.keep, c.mode, got, c.want)
		}
	}
}

// TestKeepUnderLeavesEveryCopyThere: under=DIR keeps all copies in DIR,
// not only the keeper.
func TestKeepUnderLeavesEveryCopyThere(t *testing.T) {
	g := group(100,
		m("/r/keep/x", 1, 10, 300),
		m("/r/keep/sub/y", 1, 11, 100),
		m("/r/other/z", 1, 12, 50),
		m("/r/keeper-not/w", 1, 13, 60), // a sibling named like DIR is not in it
	)
	k, _ := ParseKeep("under=/r/keep")
	p := MakePlan([]store.Group{g}, PlanOptions{Mode: Trash, Keep: k})
	if got, want := describe(p), "/r/keep/sub/y <- /r/other/z,/r/keeper-not/w"; got != want {
		t.Errorf("plan %s; want %s", got, want)
	}
}

// TestKeepBreaksTiesByDefault: equal mtimes fall back to the default
// order (more names first, then the smallest path).
func TestKeepBreaksTiesByDefault(t *testing.T) {
	g := group(100,
		m("/r/c", 1, 10, 100),
		m("/r/b", 1, 11, 100),
		m("/r/a", 1, 12, 50),
	)
	k, _ := ParseKeep("newest")
	p := MakePlan([]store.Group{g}, PlanOptions{Mode: Reflink, Keep: k})
	if got, want := describe(p), "/r/b <- /r/c,/r/a"; got != want {
		t.Errorf("plan %s; want %s", got, want)
	}
}

// TestKeepShortestNamesTheShortLink: the keeper of an inode with two
// names is named by its shortest one.
func TestKeepShortestNamesTheShortLink(t *testing.T) {
	g := group(100,
		m("/r/long/name/one", 1, 10, 100),
		m("/r/s", 1, 10, 100),
		m("/r/mid/two", 1, 11, 100),
	)
	k, _ := ParseKeep("shortest-path")
	p := MakePlan([]store.Group{g}, PlanOptions{Mode: Reflink, Keep: k})
	if got, want := describe(p), "/r/s <- /r/mid/two"; got != want {
		t.Errorf("plan %s; want %s", got, want)
	}
}
