package dedup

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// m is a member for the tables: path, device, inode, mtime.
func m(path string, dev, ino uint64, mtime int64) store.Member {
	return store.Member{Path: []byte(path), Record: store.Record{
		Backend: key.SHA256E, Digest: make([]byte, 32), Size: 100, MtimeNs: mtime, Dev: dev, Ino: ino,
	}}
}

func group(size int64, members ...store.Member) store.Group {
	for i := range members {
		members[i].Record.Size = size
	}
	return store.Group{Backend: key.SHA256, Digest: make([]byte, 32), Size: size, Members: members}
}

// describe writes a plan as "keeper <- target,target | keeper <- …".
func describe(p Plan) string {
	var gs []string
	for _, g := range p.Groups {
		var as []string
		for _, a := range g.Actions {
			var ts []string
			for _, t := range a.Targets {
				ts = append(ts, string(t.Path))
			}
			as = append(as, strings.Join(ts, "+"))
		}
		gs = append(gs, fmt.Sprintf("%s <- %s", g.Keeper.Path, strings.Join(as, ",")))
	}
	return strings.Join(gs, " | ")
}

func TestPlan(t *testing.T) {
	paths := func(p ...string) [][]byte {
		var out [][]byte
		for _, s := range p {
			out = append(out, []byte(s))
		}
		return out
	}
	for _, c := range []struct {
		name  string
		g     store.Group
		opt   PlanOptions
		want  string
		frees int64
	}{
		{"two copies: the older keeps",
			group(100, m("/r/b.jpg", 1, 2, 50), m("/r/a.JPG", 1, 3, 40)), PlanOptions{},
			"/r/a.JPG <- /r/b.jpg", 100},
		{"same mtime: the smaller path keeps",
			group(100, m("/r/b", 1, 2, 5), m("/r/a", 1, 3, 5), m("/r/c", 1, 4, 5)), PlanOptions{},
			"/r/a <- /r/b,/r/c", 200},
		{"names of one inode are one file",
			group(100, m("/r/a", 1, 2, 5), m("/r/b", 1, 2, 5)), PlanOptions{},
			"", 0},
		{"the inode with most names keeps, even when newer",
			group(100, m("/r/new1", 1, 9, 90), m("/r/new2", 1, 9, 90), m("/r/old", 1, 3, 10)), PlanOptions{},
			"/r/new1 <- /r/old", 100},
		{"reflink acts on one name of a linked target",
			group(100, m("/r/k", 1, 2, 1), m("/r/k2", 1, 2, 1), m("/r/t1", 1, 3, 5), m("/r/t2", 1, 3, 5)), PlanOptions{},
			"/r/k <- /r/t1", 100},
		{"hardlink relinks every name of a target",
			group(100, m("/r/k", 1, 2, 1), m("/r/k2", 1, 2, 1), m("/r/t1", 1, 3, 5), m("/r/t2", 1, 3, 5)), PlanOptions{Mode: Hardlink},
			"/r/k <- /r/t1+/r/t2", 100},
		{"hardlink leaves git-annex's objects alone; reflink shares them",
			group(100, m("/r/.git/annex/objects/Xx/Yy/K/K", 1, 2, 1), m("/r/a", 1, 3, 5), m("/r/b", 1, 4, 6)), PlanOptions{Mode: Hardlink},
			"/r/a <- /r/b", 100},
		{"reflink shares git-annex's objects",
			group(100, m("/r/.git/annex/objects/Xx/Yy/K/K", 1, 2, 1), m("/r/a", 1, 3, 5)), PlanOptions{},
			"/r/.git/annex/objects/Xx/Yy/K/K <- /r/a", 100},
		{"hardlink leaves out a target with a name outside the paths",
			group(100, m("/r/k", 1, 2, 1), m("/r/t1", 1, 3, 5), m("/s/t2", 1, 3, 5), m("/r/u", 1, 4, 6)), PlanOptions{Mode: Hardlink, Paths: paths("/r")},
			"/r/k <- /r/u", 100},
		{"reflink keeps a target with a name outside the paths",
			group(100, m("/r/k", 1, 2, 1), m("/r/t1", 1, 3, 5), m("/s/t2", 1, 3, 5)), PlanOptions{Paths: paths("/r")},
			"/r/k <- /r/t1", 100},
		{"different file systems are planned apart",
			group(100, m("/a/1", 1, 2, 1), m("/b/1", 2, 2, 1), m("/a/2", 1, 3, 2), m("/b/2", 2, 3, 2), m("/c/1", 3, 2, 0)), PlanOptions{},
			"/a/1 <- /a/2 | /b/1 <- /b/2", 200},
		{"alone on its file system",
			group(100, m("/a/1", 1, 2, 1), m("/b/1", 2, 3, 1)), PlanOptions{},
			"", 0},
		{"outside the paths: a sibling with a common prefix is not below",
			group(100, m("/r/a", 1, 2, 1), m("/rr/a", 1, 3, 1), m("/r/sub/b", 1, 4, 2)), PlanOptions{Paths: paths("/r")},
			"/r/a <- /r/sub/b", 100},
		{"a keeper outside the paths is not used",
			group(100, m("/old/a", 1, 2, 1), m("/r/a", 1, 3, 5)), PlanOptions{Paths: paths("/r")},
			"", 0},
		{"files named as paths",
			group(100, m("/r/a", 1, 2, 1), m("/r/b", 1, 3, 5), m("/r/c", 1, 4, 5)), PlanOptions{Paths: paths("/r/c", "/r/a")},
			"/r/a <- /r/c", 100},
		{"the root covers everything",
			group(100, m("/r/a", 1, 2, 1), m("/s/b", 1, 3, 5)), PlanOptions{Paths: paths("/")},
			"/r/a <- /s/b", 100},
		{"below the minimum size",
			group(100, m("/r/a", 1, 2, 1), m("/r/b", 1, 3, 5)), PlanOptions{MinSize: 101},
			"", 0},
		{"at the minimum size",
			group(100, m("/r/a", 1, 2, 1), m("/r/b", 1, 3, 5)), PlanOptions{MinSize: 100},
			"/r/a <- /r/b", 100},
		{"empty files free nothing",
			group(0, m("/r/a", 1, 2, 1), m("/r/b", 1, 3, 5)), PlanOptions{},
			"", 0},
		{"a member of another size is left out",
			func() store.Group {
				g := group(100, m("/r/a", 1, 2, 1), m("/r/b", 1, 3, 5), m("/r/c", 1, 4, 5))
				g.Members[2].Record.Size = 99
				return g
			}(), PlanOptions{},
			"/r/a <- /r/b", 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := MakePlan([]store.Group{c.g}, c.opt)
			if got := describe(p); got != c.want {
				t.Errorf("plan %q, want %q", got, c.want)
			}
			if p.Frees != c.frees {
				t.Errorf("frees %d, want %d", p.Frees, c.frees)
			}
			n := 0
			for _, g := range p.Groups {
				n += len(g.Actions)
				if g.Dev != g.Keeper.Record.Dev {
					t.Errorf("group on dev %d with a keeper on %d", g.Dev, g.Keeper.Record.Dev)
				}
				for _, a := range g.Actions {
					for _, tg := range a.Targets {
						if tg.Record.Dev != g.Dev || tg.Record.Ino == g.Keeper.Record.Ino {
							t.Errorf("target %s (%d,%d) against keeper (%d,%d)", tg.Path, tg.Record.Dev, tg.Record.Ino, g.Dev, g.Keeper.Record.Ino)
						}
					}
				}
			}
			if n != p.Actions {
				t.Errorf("Actions %d, counted %d", p.Actions, n)
			}
		})
	}
}

var rnd = rand.New(rand.NewPCG(13, 13))

// TestPlanIsStable: the member order of the index does not change the plan.
func TestPlanIsStable(t *testing.T) {
	g := group(100, m("/r/a", 1, 5, 3), m("/r/b", 2, 6, 3), m("/r/c", 1, 7, 3), m("/r/d", 2, 8, 1), m("/r/e", 1, 9, 3))
	want := describe(MakePlan([]store.Group{g}, PlanOptions{}))
	for range 20 {
		h := g
		h.Members = slices.Clone(g.Members)
		rnd.Shuffle(len(h.Members), func(i, j int) { h.Members[i], h.Members[j] = h.Members[j], h.Members[i] })
		if got := describe(MakePlan([]store.Group{h}, PlanOptions{})); got != want {
			t.Fatalf("plan %q after shuffling, want %q", got, want)
		}
	}
}

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		p, dir string
		want   bool
	}{
		{"/a", "/a", true}, {"/a/b", "/a", true}, {"/ab", "/a", false}, {"/a", "/a/b", false},
		{"/a", "/", true}, {"/", "/", true}, {"/a/b/c", "/a/b", true},
	} {
		if got := within([]byte(c.p), [][]byte{[]byte(c.dir)}); got != c.want {
			t.Errorf("within(%q, [%q]) = %v", c.p, c.dir, got)
		}
	}
}
