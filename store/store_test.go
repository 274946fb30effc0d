package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/key"
)

func TestPutGetRoundTrip(t *testing.T) {
	s := openTest(t)
	r := rec("a", 10, 1, 100)
	r.Generation = 7
	r.VerifiedAt = r.HashedAt + 5
	name := "/home/u/caf\xe9 \xff.JPG" // not UTF-8
	mustPut(t, s, name, r)
	got, ok, err := s.Get([]byte(name))
	if err != nil || !ok {
		t.Fatalf("Get: %v %v", ok, err)
	}
	if !got.Equal(&r) {
		t.Fatalf("Get = %+v, want %+v", got, r)
	}
	if _, ok, _ := s.Get([]byte("/home/u/other")); ok {
		t.Fatal("Get of a missing path found something")
	}
	if ps, _ := s.ByInodeAll(1, 100); len(ps) != 1 || string(ps[0]) != name {
		t.Fatalf("ByInodeAll = %q", ps)
	}
}

func TestGetCopiesOutOfTransaction(t *testing.T) {
	s := openTest(t)
	mustPut(t, s, "/a/x", rec("a", 1, 1, 1))
	got, _, _ := s.Get([]byte("/a/x"))
	mustPut(t, s, "/a/x", rec("b", 1, 1, 1))
	want := rec("a", 1, 1, 1)
	if !bytes.Equal(got.Digest, want.Digest) {
		t.Fatal("digest returned by Get changed after a later write")
	}
}

func TestBadPathsAndRecords(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for _, bad := range []string{"", "rel/x", "/a/", "/a//b", "/a/./b", "/a/../b", "/a\x00b", "/"} {
		if err := s.Put(ctx, []byte(bad), rec("a", 1, 1, 1)); !errors.Is(err, ErrPath) {
			t.Errorf("Put(%q) = %v, want ErrPath", bad, err)
		}
	}
	r := rec("a", 1, 1, 1)
	r.Digest = r.Digest[:5]
	if err := s.Put(ctx, []byte("/x"), r); !errors.Is(err, ErrRecord) {
		t.Errorf("short digest: %v", err)
	}
	if _, err := s.Move(ctx, []byte("/a"), []byte("/a/b")); !errors.Is(err, ErrPath) {
		t.Errorf("move into itself: %v", err)
	}
	if _, err := s.Move(ctx, []byte("/nothing"), []byte("/b")); !errors.Is(err, ErrNotFound) {
		t.Errorf("move of missing: %v", err)
	}
	if _, err := s.Move(ctx, []byte("/nothing"), []byte("/nothing")); !errors.Is(err, ErrNotFound) {
		t.Errorf("move of missing onto itself: %v", err)
	}
}

func TestDigestIndexAcrossExtensions(t *testing.T) {
	s := openTest(t)
	a := rec("same", 4, 1, 1)
	b := rec("same", 4, 1, 2)
	b.Backend = key.SHA256
	mustPut(t, s, "/p/a.JPG", a)
	mustPut(t, s, "/p/b.jpg", b)
	got, err := s.ByDigest(key.SHA256E, a.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/p/a.JPG", "/p/b.jpg"}; !slices.Equal(paths(got), want) {
		t.Fatalf("ByDigest = %q, want %q", paths(got), want)
	}
}

func TestOnlyOKRecordsAreDuplicates(t *testing.T) {
	s := openTest(t)
	a, b := rec("c", 100, 1, 1), rec("c", 100, 1, 2)
	b.State = StateCorrupt
	mustPut(t, s, "/a", a)
	mustPut(t, s, "/b", b)
	if got, _ := s.ByDigest(key.SHA256, a.Digest); len(got) != 1 {
		t.Fatalf("ByDigest = %q, want only the ok record", paths(got))
	}
	st, _ := s.Stats()
	if st.DupGroups != 0 || st.Files != 2 || st.Digested != 1 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestHardlinksAreNotWaste(t *testing.T) {
	s := openTest(t)
	mustPut(t, s, "/d/a", rec("x", 1000, 1, 1))
	mustPut(t, s, "/d/b", rec("x", 1000, 1, 1)) // hardlink of a
	st, _ := s.Stats()
	if st.DupGroups != 0 || st.Duplicate != 0 {
		t.Fatalf("hardlinks counted as waste: %+v", st)
	}
	all, _ := s.ByInodeAll(1, 1)
	if len(all) != 2 {
		t.Fatalf("ByInodeAll = %q", paths(all))
	}
	mustPut(t, s, "/d/c", rec("x", 1000, 1, 2))
	st, _ = s.Stats()
	if st.DupGroups != 1 || st.Duplicate != 1000 {
		t.Fatalf("Stats = %+v, want one group wasting 1000", st)
	}
	var groups []Group
	if err := s.Dups(context.Background(), DupOptions{}, func(g Group) error { groups = append(groups, g); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Inodes != 2 || len(groups[0].Members) != 3 || groups[0].Duplicate != 1000 {
		t.Fatalf("Dups = %+v", groups)
	}
}

func TestDupsOrderPagingMinSize(t *testing.T) {
	s := openTest(t)
	ino := uint64(0)
	// group i: size 100*i, i+1 copies → waste 100*i*i.
	for i := 1; i <= 30; i++ {
		for c := 0; c <= i; c++ {
			ino++
			mustPutQuiet(s, p("/g%d/c%d", i, c), rec(strings.Repeat("x", i), int64(100*i), 1, ino))
		}
	}
	flushed(t, s)
	var wasted []int64
	var after []byte
	for {
		n := 0
		err := s.Dups(context.Background(), DupOptions{MinSize: 500, After: after, Limit: 7}, func(g Group) error {
			wasted = append(wasted, g.Duplicate)
			after = g.Cursor
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if len(wasted) != 26 {
		t.Fatalf("got %d groups, want 26 (sizes ≥ 500)", len(wasted))
	}
	for i := 1; i < len(wasted); i++ {
		if wasted[i] > wasted[i-1] {
			t.Fatalf("not ordered by waste: %v", wasted)
		}
	}
	if wasted[0] != 100*30*30 {
		t.Fatalf("largest waste %d", wasted[0])
	}
}

// mustPutQuiet queues a put without waiting; flushed waits for all of them.
func mustPutQuiet(s *Store, path []byte, r Record) {
	s.Submit(Change{Op: OpPut, Path: path, Record: r}, nil)
}

func flushed(t testing.TB, s *Store) {
	t.Helper()
	if err := s.PutMeta(context.Background(), "flush", nil); err != nil {
		t.Fatal(err)
	}
}

func TestMoveSubtreeKeepsRecords(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	mustPut(t, s, "/r/a/x", rec("1", 1, 1, 1))
	mustPut(t, s, "/r/a/b/y", rec("2", 2, 1, 2))
	mustPut(t, s, "/r/ab", rec("3", 3, 1, 3))    // not under /r/a
	mustPut(t, s, "/r/z/old", rec("4", 4, 1, 4)) // kept: a move merges
	if m, err := s.Move(ctx, []byte("/r/a"), []byte("/r/z")); err != nil || m != (Moved{Moved: 2}) {
		t.Fatalf("Move = %+v, %v; want 2 moved", m, err)
	}
	var got []string
	if err := s.Subtree(ctx, []byte("/r"), func(path []byte, r Record) error {
		got = append(got, string(path))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"/r/ab", "/r/z/b/y", "/r/z/old", "/r/z/x"}; !slices.Equal(got, want) {
		t.Fatalf("after move: %q, want %q", got, want)
	}
	if ps, _ := s.ByInodeAll(1, 2); len(ps) != 1 || string(ps[0]) != "/r/z/b/y" {
		t.Fatalf("ByInodeAll after move = %q", ps)
	}
	if _, err := s.Move(ctx, []byte("/r/ab"), []byte("/q/ab")); err != nil {
		t.Fatal(err)
	}
	if r, ok, _ := s.Get([]byte("/q/ab")); !ok || r.Size != 3 {
		t.Fatal("file move lost the record")
	}
	if err := s.DeleteSubtree(ctx, []byte("/r")); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats()
	if st.Files != 1 {
		t.Fatalf("after DeleteSubtree: %d files", st.Files)
	}
}

func TestMarkSweep(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	g1, _ := s.NextGeneration(ctx)
	g2, _ := s.NextGeneration(ctx)
	if g2 <= g1 {
		t.Fatalf("generations %d, %d", g1, g2)
	}
	for i := 0; i < 3000; i++ {
		r := rec("x", 1, 1, uint64(i))
		r.Generation = g1
		mustPutQuiet(s, p("/root/d%d/f%d", i%7, i), r)
	}
	r := rec("y", 1, 2, 1)
	r.Generation = g1
	mustPutQuiet(s, []byte("/other/f"), r)
	flushed(t, s)
	var marks []Change
	for i := 0; i < 3000; i += 2 {
		marks = append(marks, Change{Op: OpMark, Path: p("/root/d%d/f%d", i%7, i), Gen: g2})
	}
	if err := s.SubmitAll(ctx, marks); err != nil {
		t.Fatal(err)
	}
	// The scan's own memory keeps the odd files of d0.
	keep := func(path []byte, _ *Record) bool { return bytes.HasPrefix(path, []byte("/root/d0/")) }
	kept := 0
	for i := 1; i < 3000; i += 2 {
		if i%7 == 0 {
			kept++
		}
	}
	n, err := s.Sweep(ctx, []byte("/root"), g2, keep)
	if err != nil || n != 1500-kept {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, 1500-kept)
	}
	st, _ := s.Stats()
	if st.Files != int64(1501+kept) {
		t.Fatalf("files after sweep: %d, want %d", st.Files, 1501+kept)
	}
}

func TestMeta(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	if _, ok, _ := s.GetMeta("calibration"); ok {
		t.Fatal("meta present in a new index")
	}
	if err := s.PutMeta(ctx, "calibration", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	v, ok, err := s.GetMeta("calibration")
	if err != nil || !ok || string(v) != `{"x":1}` {
		t.Fatalf("GetMeta = %q %v %v", v, ok, err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "index.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	mustPut(t, s, "/a", rec("a", 1, 1, 1))
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestAt(t, path, Options{})
	if _, ok, _ := s.Get([]byte("/a")); !ok {
		t.Fatal("record lost across reopen")
	}
	st, _ := s.Stats()
	if st.SchemaVer != SchemaVersion {
		t.Fatalf("schema %d", st.SchemaVer)
	}
}

func TestCloseFlushesWithoutRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	s.Submit(Change{Op: OpPut, Path: []byte("/q"), Record: rec("q", 1, 1, 1)}, func(err error) { done <- err })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("queued change: %v", err)
	}
	s.Submit(Change{Op: OpDelete, Path: []byte("/q")}, func(err error) { done <- err })
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("submit after close: %v", err)
	}
	s = openTestAt(t, path, Options{})
	if _, ok, _ := s.Get([]byte("/q")); !ok {
		t.Fatal("change queued before Close was lost")
	}
}

func TestSecondOpenerLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	openTestAt(t, path, Options{})
	start := time.Now()
	_, err := Open(path, Options{LockTimeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("second Open = %v, want ErrLocked naming %s", err, path)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("second Open took %s", d)
	}
	_, err = Open(path, Options{ReadOnly: true, LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("read-only Open of a held index = %v", err)
	}
}

func TestDefaultPath(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/x/state")
	if p, _ := DefaultPath(); p != "/x/state/annexd/index.db" {
		t.Fatalf("DefaultPath = %s", p)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if p, _ := DefaultPath(); p != "/home/u/.local/state/annexd/index.db" {
		t.Fatalf("DefaultPath = %s", p)
	}
}

func TestReadOnlyRefusesWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Put(context.Background(), []byte("/a"), rec("a", 1, 1, 1)); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Put on read-only = %v", err)
	}
	if rep, err := ro.Check(); err != nil || !rep.OK() {
		t.Fatalf("Check read-only: %+v %v", rep, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

func TestRootSubtree(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for _, path := range []string{"/a", "/b/c", "/b/d/e"} {
		mustPut(t, s, path, rec(path, 1, 1, 1))
	}
	n := 0
	if err := s.Subtree(ctx, []byte("/"), func([]byte, Record) error { n++; return nil }); err != nil || n != 3 {
		t.Fatalf("Subtree(/) saw %d, %v", n, err)
	}
	if err := s.DeleteSubtree(ctx, []byte("/")); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(); st.Files != 0 {
		t.Fatalf("%d records left after DeleteSubtree(/)", st.Files)
	}
}

func TestCheckPath(t *testing.T) {
	good := []string{"/a", "/.hidden", "/a/..b", "/a/b.", "/a/...", "/a/.b/c", "/a b/\xff\xfe", "/" + strings.Repeat("x", maxPath-1)}
	bad := []string{"", "a", "/", "//", "/a/", "/a//b", "/.", "/..", "/a/.", "/a/..", "/./a", "/../a",
		"/a/./b", "/a/../b", "/a\x00b", "/a/b\x00", "/" + strings.Repeat("x", maxPath)}
	for _, p := range good {
		if err := checkPath([]byte(p), false); err != nil {
			t.Errorf("checkPath(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range bad {
		if err := checkPath([]byte(p), false); !errors.Is(err, ErrPath) {
			t.Errorf("checkPath(%q) = %v, want ErrPath", p, err)
		}
	}
	if err := checkPath([]byte("/"), true); err != nil {
		t.Errorf("checkPath(/, dirOK) = %v", err)
	}
}

func TestGetMany(t *testing.T) {
	s := openTest(t)
	mustPut(t, s, "/d/a", rec("a", 1, 1, 1))
	mustPut(t, s, "/d/b", rec("b", 2, 1, 2))
	mustPut(t, s, "/e/c", rec("c", 3, 1, 3))
	paths := [][]byte{p("/d/a"), p("/d/missing"), p("/d/b"), p("/nodir/x"), p("/e/c"), p("/d/a")}
	out, err := s.GetMany(paths, nil)
	if err != nil || len(out) != len(paths) {
		t.Fatalf("GetMany: %d answers, %v", len(out), err)
	}
	for i, path := range paths {
		r, ok, err := s.Get(path)
		if err != nil || ok != out[i].OK || (ok && !r.Equal(&out[i].Record)) {
			t.Errorf("%s: GetMany %v %+v, Get %v %+v (%v)", path, out[i].OK, out[i].Record, ok, r, err)
		}
	}
	// More paths than one read transaction takes; answers are appended.
	many := make([][]byte, 0, 2*chunk+5)
	for i := range cap(many) {
		many = append(many, paths[i%len(paths)])
	}
	out, err = s.GetMany(many, out[:1])
	if err != nil || len(out) != 1+len(many) {
		t.Fatalf("GetMany of %d: %d answers, %v", len(many), len(out), err)
	}
	for i := range many {
		if out[1+i].OK != (i%len(paths) != 1 && i%len(paths) != 3) {
			t.Fatalf("answer %d (%s): OK %v", i, many[i], out[1+i].OK)
		}
	}
	if _, err := s.GetMany([][]byte{p("/d/a"), p("rel")}, nil); !errors.Is(err, ErrPath) {
		t.Errorf("bad path: %v", err)
	}
}

// TestOneGroupInNewDirectory: puts into a directory created by the same
// group, out of name order and repeated, replace each other correctly.
func TestOneGroupInNewDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	puts := []struct {
		name, content string
		ino           uint64
	}{{"b", "1", 1}, {"a", "2", 2}, {"b", "3", 3}, {"c", "1", 4}, {"a", "4", 5}, {"d", "5", 6}, {"c", "6", 7}}
	errs := make(chan error, len(puts)+2)
	for _, u := range puts {
		s.Submit(Change{Op: OpPut, Path: p("/new/%s", u.name), Record: rec(u.content, 1, 1, u.ino)},
			func(err error) { errs <- err })
	}
	s.Submit(Change{Op: OpDelete, Path: p("/new/d")}, func(err error) { errs <- err })
	s.Submit(Change{Op: OpPut, Path: p("/new/d"), Record: rec("7", 1, 1, 8)}, func(err error) { errs <- err })
	if err := s.Close(); err != nil { // commits the queue as one group
		t.Fatal(err)
	}
	for range len(puts) + 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	s = openTestAt(t, path, Options{NoSync: true})
	want := map[string]uint64{"a": 5, "b": 3, "c": 7, "d": 8}
	for name, ino := range want {
		r, ok, err := s.Get(p("/new/%s", name))
		if err != nil || !ok || r.Ino != ino {
			t.Errorf("/new/%s: ino %d, ok %v, %v; want ino %d", name, r.Ino, ok, err, ino)
		}
	}
	if st, _ := s.Stats(); st.Files != 4 {
		t.Errorf("%d files, want 4", st.Files)
	}
}

// TestDupsAcrossChunks lists more members than one read transaction of
// Dups takes: every group comes exactly once, whole, largest waste first.
func TestDupsAcrossChunks(t *testing.T) {
	s := openTest(t)
	const groups, copies = 1500, 3 // 4500 members > maxMembersPerTx
	ino := uint64(0)
	for i := range groups {
		for c := range copies {
			ino++
			mustPutQuiet(s, p("/g/%d/c%d", i, c), rec(fmt.Sprint("content ", i), int64(i+1), 1, ino))
		}
	}
	flushed(t, s)
	seen := map[string]bool{}
	last := int64(math.MaxInt64)
	if err := s.Dups(context.Background(), DupOptions{}, func(g Group) error {
		if seen[string(g.Digest)] {
			t.Fatalf("group of size %d listed twice", g.Size)
		}
		seen[string(g.Digest)] = true
		if g.Duplicate > last || g.Duplicate != g.Size*(copies-1) || len(g.Members) != copies {
			t.Fatalf("group of size %d: wasted %d after %d, %d members", g.Size, g.Duplicate, last, len(g.Members))
		}
		last = g.Duplicate
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != groups {
		t.Fatalf("Dups listed %d groups, want %d", len(seen), groups)
	}
}

// GetMany steps its cursor through the keys of a directory: near and far
// gaps between the names asked for, names missing between stored ones or
// past the last, repeats, and directories whose keys interleave with
// their parents' in path order all answer as Get does, in the order asked.
func TestGetManySteps(t *testing.T) {
	s := openTest(t)
	for i := range 200 {
		if i%3 != 0 {
			mustPut(t, s, fmt.Sprintf("/a/b/f%03d", i), rec(fmt.Sprint(i), int64(i), 1, uint64(i+1)))
		}
	}
	for i := range 20 { // names alike in their first 8 bytes
		mustPut(t, s, fmt.Sprintf("/a/b/samehead%03d", 2*i), rec(fmt.Sprint(-i), 1, 1, uint64(2000+i)))
	}
	mustPut(t, s, "/a/b/c/y", rec("y", 1, 1, 1000))
	mustPut(t, s, "/a/b/d", rec("d", 1, 1, 1001))
	mustPut(t, s, "/a/bz/x", rec("x", 1, 1, 1002))
	var paths [][]byte
	for i := 0; i < 230; i += 1 + i%11 { // gaps of 1 to 11 names
		paths = append(paths, p("/a/b/f%03d", i))
	}
	for i := range 40 {
		paths = append(paths, p("/a/b/samehead%03d", i))
	}
	paths = append(paths, p("/a/b/c/y"), p("/a/b/d"), p("/a/b/f005"), p("/a/bz/x"), p("/a/b/f005"), p("/a/b/zz"))
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(paths), func(i, j int) { paths[i], paths[j] = paths[j], paths[i] })
	out, err := s.GetMany(paths, nil)
	if err != nil || len(out) != len(paths) {
		t.Fatalf("GetMany: %d answers, %v", len(out), err)
	}
	hits := 0
	for i, path := range paths {
		r, ok, err := s.Get(path)
		if err != nil || ok != out[i].OK || (ok && !r.Equal(&out[i].Record)) {
			t.Errorf("%s: GetMany %v %+v, Get %v %+v (%v)", path, out[i].OK, out[i].Record, ok, r, err)
		}
		if ok {
			hits++
		}
	}
	if hits < len(paths)/2 {
		t.Errorf("only %d of %d paths found: the test asks for too few stored names", hits, len(paths))
	}
	// The answers share one buffer of digests, but each owns its bytes:
	// writing past one digest changes no other.
	for i := range out {
		out[i].Record.Digest = append(out[i].Record.Digest, 0xff)
	}
	for i, path := range paths {
		r, ok, _ := s.Get(path)
		if ok && !bytes.Equal(r.Digest, out[i].Record.Digest[:len(r.Digest)]) {
			t.Errorf("%s: digest %x after the others grew, want %x", path, out[i].Record.Digest, r.Digest)
		}
	}
}
