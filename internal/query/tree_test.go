package query

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// openTreeStore opens a store in a temporary directory with its writer
// running, and puts recs (path → record) in it.
func openTreeStore(t *testing.T, recs map[string]store.Record) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "index.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = st.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait(); st.Close() })
	var cs []store.Change
	for p, r := range recs {
		cs = append(cs, store.Change{Op: store.OpPut, Path: []byte(p), Record: r})
	}
	if err := st.SubmitAll(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	if err := st.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

func treeRec(digest []byte, size int64, ino uint64) store.Record {
	return store.Record{Backend: key.SHA256E, Digest: digest, Size: size, Dev: 1, Ino: ino, State: store.StateOK,
		MtimeNs: 1_700_000_000_000_000_000, CtimeNs: 1_700_000_000_000_000_000, HashedAt: 1_700_000_000_000_000_001}
}

// levelFigures is a level as name → [bytes, files, reclaimable].
func levelFigures(t *testing.T, tr *Tree, path string) (api.TreeLevel, map[string][3]int64) {
	t.Helper()
	var p []byte
	if path != "" {
		p = []byte(path)
	}
	lvl, err := tr.TreeLevel(context.Background(), p)
	if err != nil {
		t.Fatalf("level %q: %v", path, err)
	}
	out := map[string][3]int64{}
	for _, c := range lvl.Children {
		out[c.Name] = [3]int64{c.Bytes, c.Files, c.Reclaimable}
	}
	return lvl, out
}

func wantLevel(t *testing.T, tr *Tree, path string, want map[string][3]int64) api.TreeLevel {
	t.Helper()
	lvl, got := levelFigures(t, tr, path)
	if len(got) != len(want) {
		t.Errorf("level %q: %v, want %v", path, got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("level %q: %q is [bytes files reclaimable] %v, want %v", path, k, got[k], v)
		}
	}
	for i := 1; i < len(lvl.Children); i++ {
		if lvl.Children[i].Bytes > lvl.Children[i-1].Bytes {
			t.Errorf("level %q: children not biggest first: %+v", path, lvl.Children)
		}
	}
	return lvl
}

// The tree counts every record within the roots by folder, a folder's
// figures its whole subtree's; the reclaimable bytes are each extra
// inode's, under its first name: without a survey every inode but the
// first by its size, with one every known inode but the one holding
// least alone, by what it holds alone. Records outside the roots and
// hard links count nothing reclaimable; a new commit counts again.
func TestTreeLevels(t *testing.T) {
	a := sha256.Sum256([]byte("a"))
	b := sha256.Sum256([]byte("b"))
	recs := map[string]store.Record{
		"/r1/a/f1":   treeRec(a[:], 100, 1),
		"/r1/b/f2":   treeRec(a[:], 100, 2),
		"/r1/b/link": treeRec(a[:], 100, 2), // a hard link of f2
		"/r1/b/c/f3": treeRec(a[:], 100, 3),
		"/r1/top":    treeRec(b[:], 5, 4),
		"/r1/p":      {Size: 7, Dev: 1, Ino: 5, State: store.StatePending},
		"/old/x":     treeRec(a[:], 100, 9), // outside the roots
	}
	st := openTreeStore(t, recs)
	x := New(Config{Store: st, Roots: roots.Of([]string{"/r1", "/r2"}, nil)})
	tr := NewTree(x)

	top := wantLevel(t, tr, "", map[string][3]int64{"/r1": {412, 6, 200}, "/r2": {0, 0, 0}})
	if top.Bytes != 412 || top.Files != 6 || top.Reclaimable != 200 || top.Complete {
		t.Errorf("top level %+v: want 412 bytes, 6 files, 200 reclaimable, not complete (a file is pending)", top.TreeNode)
	}
	r1 := wantLevel(t, tr, "/r1", map[string][3]int64{"b": {300, 3, 200}, "a": {100, 1, 0}, "": {12, 2, 0}})
	if r1.Name != "/r1" || string(r1.Path) != "/r1" || r1.Bytes != 412 {
		t.Errorf("level /r1 is %+v", r1.TreeNode)
	}
	wantLevel(t, tr, "/r1/b", map[string][3]int64{"c": {100, 1, 100}, "": {200, 2, 100}})
	if _, err := tr.TreeLevel(context.Background(), []byte("/r1/none")); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("a folder with no records: %v, want ErrNotFound", err)
	}

	// With a survey: f2's inode shares its blocks (holds nothing alone)
	// and is kept; f1 and f3 give back what they hold alone.
	sv := store.Survey{At: 1, Inodes: []store.SurveyInode{
		{Dev: 1, Ino: 1, Placed: 100, Alone: 100, Copy: 0, Known: true},
		{Dev: 1, Ino: 2, Placed: 100, Alone: 0, Copy: 1, Known: true},
		{Dev: 1, Ino: 3, Placed: 100, Alone: 60, Copy: 2, Known: true},
		{Dev: 1, Ino: 9, Placed: 100, Alone: 100, Copy: 3, Known: true},
	}}
	seen := make([]store.Seen, len(sv.Inodes))
	for i := range seen {
		seen[i] = store.Seen{Size: 100, MtimeNs: 1_700_000_000_000_000_000, CtimeNs: 1_700_000_000_000_000_000}
	}
	if err := st.PutSurvey(context.Background(), key.SHA256, a[:], sv, seen); err != nil {
		t.Fatal(err)
	}
	wantLevel(t, tr, "/r1", map[string][3]int64{"b": {300, 3, 60}, "a": {100, 1, 100}, "": {12, 2, 0}})
}

// The tree's count equals the count of refCountTree (every group listed
// by Dups with a path per member) at every folder, on a tree of many
// folders with copies, hard links, a survey, a pending file and records
// outside the roots; and again after records were deleted, added, moved
// and edited, the same Tree answering.
func TestTreeMatchesRecount(t *testing.T) {
	ctx := context.Background()
	cs := benchTreeChanges(4000)
	for i := range 40 { // hard links, and copies outside the roots
		r := cs[i*7].Record
		cs = append(cs, store.Change{Op: store.OpPut, Path: fmt.Appendf(nil, "/home/u/links/l%d", i), Record: r},
			store.Change{Op: store.OpPut, Path: fmt.Appendf(nil, "/old/o%d", i), Record: with(r, uint64(90_000+i))})
	}
	cs = append(cs, store.Change{Op: store.OpPut, Path: []byte("/home/u/p"), Record: store.Record{Size: 7, Dev: 1, Ino: 99_999, State: store.StatePending}})
	st := openTreeStore(t, nil)
	if err := st.SubmitAll(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := st.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	g, ok, err := st.DupGroup(cs[0].Record.Backend, cs[0].Record.Digest, store.DupOptions{Brief: true})
	if err != nil || !ok {
		t.Fatalf("the first file's group: %v %v", ok, err)
	}
	var sv store.Survey
	var seen []store.Seen
	for i, m := range g.Members {
		if sv.Find(m.Record.Dev, m.Record.Ino) >= 0 {
			continue
		}
		sv.Inodes = append(sv.Inodes, store.SurveyInode{Dev: m.Record.Dev, Ino: m.Record.Ino, Placed: g.Size, Alone: g.Size / int64(1+i/2), Copy: len(sv.Inodes), Known: true})
		slices.SortFunc(sv.Inodes, func(a, b store.SurveyInode) int { return cmp.Compare(a.Ino, b.Ino) })
	}
	for range sv.Inodes {
		seen = append(seen, store.Seen{Size: g.Size, MtimeNs: cs[0].Record.MtimeNs, CtimeNs: cs[0].Record.CtimeNs})
	}
	sv.At = 1
	if err := st.PutSurvey(ctx, g.Backend, g.Digest, sv, seen); err != nil {
		t.Fatal(err)
	}
	set := roots.Of([]string{"/home/u", "/home/v"}, nil)
	tr := NewTree(New(Config{Store: st, Roots: set}))
	sameTree(t, tr, st, set)

	var more []store.Change
	for i := 0; i < len(cs)-100; i += 97 {
		more = append(more, store.Change{Op: store.OpDelete, Path: cs[i].Path})
		r := cs[i+1].Record // a new copy of another file, and an edit to the content of a third
		more = append(more, store.Change{Op: store.OpPut, Path: fmt.Appendf(nil, "/home/v/new%d", i), Record: with(r, uint64(200_000+i))},
			store.Change{Op: store.OpPut, Path: cs[i+2].Path, Record: with(cs[i+50].Record, cs[i+2].Record.Ino)})
	}
	if err := st.SubmitAll(ctx, more); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Move(ctx, []byte("/home/u/Music"), []byte("/home/v/Music")); err != nil {
		t.Fatal(err)
	}
	sameTree(t, tr, st, set)
}

// with returns r with inode ino.
func with(r store.Record, ino uint64) store.Record {
	r.Ino = ino
	return r
}

// sameTree compares every folder level of tr with refCountTree's.
func sameTree(t *testing.T, tr *Tree, st *store.Store, set roots.Set) {
	t.Helper()
	ref, err := refCountTree(context.Background(), st, set)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range append([]string{""}, slices.Sorted(maps.Keys(ref.byPath))...) {
		var path []byte
		if p != "" {
			path = []byte(p)
		}
		want, err := ref.level(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tr.TreeLevel(context.Background(), path)
		if err != nil {
			t.Fatalf("level %q: %v", p, err)
		}
		got.ComputedAt, want.ComputedAt = 0, 0
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("level %q:\n got %+v\nwant %+v", p, got, want)
		}
		n += len(got.Children)
		if got.Reclaimable > 0 {
			n++
		}
	}
	if len(ref.byPath) < 100 || n < 200 {
		t.Fatalf("only %d folders, %d children and reclaimable levels compared", len(ref.byPath), n)
	}
}
