package store

import (
	"context"
	"errors"
	"testing"
)

// A second disk mounted where the first was: its file's record shelves
// the first disk's, which comes back with its digest and its finding when
// the first disk does, and shelves the second's in turn.
func TestShelf(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	const devA, devB = 1<<62 | 0xa, 1<<62 | 0xb
	a := rec("disk a", 10, devA, 5)
	a.State = StateCorrupt // an audit's finding: it must survive the swap
	b := rec("disk b", 20, devB, 5)
	mustPut(t, s, "/m/f", a)
	if err := s.SubmitAll(ctx, []Change{{Op: OpPut, Path: []byte("/m/f"), Record: b, Shelve: true}}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Get([]byte("/m/f"))
	if err != nil || !ok || !got.SameContent(&b) {
		t.Fatalf("after the put: %+v %v %v; want disk b's record", got, ok, err)
	}
	shelved, ok, err := s.Shelved(devA, []byte("/m/f"))
	if err != nil || !ok || !shelved.SameContent(&a) {
		t.Fatalf("shelved: %+v %v %v; want disk a's record", shelved, ok, err)
	}
	st, _ := s.Stats()
	if st.Files != 1 || st.Shelved != 1 || st.Bytes != 20 {
		t.Errorf("stats %+v: want 1 file of 20 bytes and 1 shelved", st)
	}

	// A stale expectation is refused.
	stale := shelved
	stale.HashedAt++
	if err := s.Unshelve(ctx, []byte("/m/f"), stale, 9); !errors.Is(err, ErrConflict) {
		t.Errorf("Unshelve of a changed record: %v, want ErrConflict", err)
	}
	if err := s.Unshelve(ctx, []byte("/m/f"), shelved, 9); err != nil {
		t.Fatal(err)
	}
	got, _, _ = s.Get([]byte("/m/f"))
	if !got.SameContent(&a) || got.State != StateCorrupt || got.Generation != 9 {
		t.Errorf("after Unshelve: %+v; want disk a's corrupt record at generation 9", got)
	}
	if _, ok, _ := s.Shelved(devB, []byte("/m/f")); !ok {
		t.Errorf("disk b's record was not shelved in turn")
	}
	counts, err := s.ShelfCount(ctx)
	if err != nil || len(counts) != 1 || counts[devB] != 1 {
		t.Errorf("ShelfCount = %v, %v; want {b: 1}", counts, err)
	}

	// A put of the same file system replaces, as always.
	a2 := rec("disk a, edited", 11, devA, 5)
	if err := s.SubmitAll(ctx, []Change{{Op: OpPut, Path: []byte("/m/f"), Record: a2, Shelve: true}}); err != nil {
		t.Fatal(err)
	}
	// A record put for a file system supersedes what the shelf kept of
	// it at that path: the file changed while its disk was away.
	b2 := rec("disk b, edited elsewhere", 21, devB, 6)
	if err := s.SubmitAll(ctx, []Change{{Op: OpPut, Path: []byte("/m/f"), Record: b2, Shelve: true}}); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := s.Shelved(devA, []byte("/m/f")); !ok || !got.SameContent(&a2) {
		t.Errorf("disk a's edited record was not shelved: %+v %v", got, ok)
	}
	if err := s.SubmitAll(ctx, []Change{{Op: OpPut, Path: []byte("/m/f"), Record: a2, Shelve: true}}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ForgetShelf(ctx, devB); err != nil || n != 1 {
		t.Errorf("ForgetShelf = %d, %v; want 1", n, err)
	}
	st, _ = s.Stats()
	if st.Shelved != 0 || st.Files != 1 {
		t.Errorf("stats %+v: want 1 file, none shelved", st)
	}
}
