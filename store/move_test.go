package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// listAll returns every path in the index, sorted.
func listAll(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	if err := s.Subtree(context.Background(), []byte("/"), func(p []byte, _ Record) error {
		out = append(out, string(p))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// A move into a directory that holds records merges: the target's records
// stay, the source's record of a name the target holds stays where it was,
// and the rest moves, subdirectories merged or moved whole.
func TestMoveMerges(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	mustPut(t, s, "/a/x", rec("ax", 1, 1, 1))
	mustPut(t, s, "/a/same", rec("a-same", 2, 1, 2))
	mustPut(t, s, "/a/sub/y", rec("ay", 3, 1, 3))
	mustPut(t, s, "/a/new/z", rec("az", 4, 1, 4))
	mustPut(t, s, "/b/same", rec("b-same", 5, 1, 5))
	mustPut(t, s, "/b/sub/w", rec("bw", 6, 1, 6))
	m, err := s.Move(ctx, []byte("/a"), []byte("/b"))
	if err != nil {
		t.Fatal(err)
	}
	if m != (Moved{Moved: 3, Left: 1}) {
		t.Errorf("Move = %+v, want 3 moved and 1 left", m)
	}
	want := []string{"/a/same", "/b/new/z", "/b/same", "/b/sub/w", "/b/sub/y", "/b/x"}
	if got := listAll(t, s); !slices.Equal(got, want) {
		t.Fatalf("after the move: %q, want %q", got, want)
	}
	if r, _, _ := s.Get([]byte("/b/same")); r.Size != 5 {
		t.Errorf("the target's own record was replaced: %+v", r)
	}
	if ps, _ := s.ByInodeAll(1, 3); len(ps) != 1 || string(ps[0]) != "/b/sub/y" {
		t.Errorf("inode index after a merge: %q", ps)
	}
	st, _ := s.Stats()
	if st.Files != 6 {
		t.Errorf("files = %d, want 6", st.Files)
	}
}

// A record written under a directory's new name just before the move of its
// records is applied stays: the move cannot remove what it does not move.
func TestMoveKeepsRecordWrittenBefore(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	mustPut(t, s, "/p1/d/f", rec("f", 1, 1, 1))
	var wg sync.WaitGroup
	wg.Add(1)
	s.Submit(Change{Op: OpPut, Path: []byte("/p3/s/x"), Record: rec("x", 2, 1, 2)}, func(err error) {
		if err != nil {
			t.Error(err)
		}
		wg.Done()
	})
	if _, err := s.Move(ctx, []byte("/p1/d"), []byte("/p3/s")); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got, want := listAll(t, s), []string{"/p3/s/f", "/p3/s/x"}; !slices.Equal(got, want) {
		t.Fatalf("after the move: %q, want %q", got, want)
	}
}

// Adopt moves a record only while both paths hold what the caller read;
// otherwise it changes nothing and names the path that changed.
func TestAdoptChecksBothPaths(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	old := rec("f", 10, 1, 7)
	mustPut(t, s, "/r/old", old)
	moved := old
	moved.CtimeNs++
	adopt := Adoption{From: []byte("/r/old"), To: []byte("/r/new"), Was: old, Record: moved}

	// To holds a record the caller did not see.
	mustPut(t, s, "/r/new", rec("other", 3, 1, 8))
	err := s.Adopt(ctx, adopt)
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || string(ce.Path) != "/r/new" || !ce.Found {
		t.Fatalf("Adopt onto a written path = %v, want a conflict at /r/new", err)
	}
	if got := listAll(t, s); !slices.Equal(got, []string{"/r/new", "/r/old"}) {
		t.Fatalf("a conflict changed the index: %q", got)
	}
	// The caller saw it: the change is made.
	seen, _, _ := s.Get([]byte("/r/new"))
	adopt.ToWas = &seen
	if err := s.Adopt(ctx, adopt); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := s.Get([]byte("/r/new")); !r.Equal(&moved) {
		t.Errorf("Adopt stored %+v, want %+v", r, moved)
	}
	if got := listAll(t, s); !slices.Equal(got, []string{"/r/new"}) {
		t.Fatalf("after Adopt: %q", got)
	}
	// From was rehashed since the caller read it.
	mustPut(t, s, "/r/a", old)
	again := old
	again.HashedAt++
	mustPut(t, s, "/r/a", again)
	err = s.Adopt(ctx, Adoption{From: []byte("/r/a"), To: []byte("/r/b"), Was: old, Record: moved})
	if !errors.As(err, &ce) || string(ce.Path) != "/r/a" || !ce.Found {
		t.Fatalf("Adopt of a rehashed record = %v, want a conflict at /r/a", err)
	}
	// From is gone.
	err = s.Adopt(ctx, Adoption{From: []byte("/r/gone"), To: []byte("/r/c"), Was: old, Record: moved})
	if !errors.As(err, &ce) || string(ce.Path) != "/r/gone" || ce.Found {
		t.Fatalf("Adopt of a missing record = %v, want a conflict at /r/gone", err)
	}
	if got := listAll(t, s); !slices.Equal(got, []string{"/r/a", "/r/new"}) {
		t.Fatalf("conflicts changed the index: %q", got)
	}
}

// Adopt with Keep leaves the old name's record (a hard link); with From as
// To it updates a record in place only while it is unchanged.
func TestAdoptKeepAndInPlace(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	r := rec("f", 10, 1, 7)
	mustPut(t, s, "/l/a", r)
	if err := s.Adopt(ctx, Adoption{From: []byte("/l/a"), To: []byte("/l/b"), Was: r, Record: r, Keep: true}); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, s); !slices.Equal(got, []string{"/l/a", "/l/b"}) {
		t.Fatalf("after a kept adoption: %q", got)
	}
	n := r
	n.CtimeNs += 5
	if err := s.Adopt(ctx, Adoption{From: []byte("/l/a"), To: []byte("/l/a"), Was: r, Record: n}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.Get([]byte("/l/a")); !got.Equal(&n) {
		t.Errorf("in-place adoption stored %+v", got)
	}
	if err := s.Adopt(ctx, Adoption{From: []byte("/l/a"), To: []byte("/l/a"), Was: r, Record: n}); !errors.Is(err, ErrConflict) {
		t.Errorf("second in-place adoption from a stale read = %v, want ErrConflict", err)
	}
}

// A conflict fails only its own change, not the group it was committed in.
func TestAdoptConflictSparesItsGroup(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, c := range []Change{
		{Op: OpPut, Path: []byte("/g/1"), Record: rec("1", 1, 1, 1)},
		{Op: OpPut, Path: []byte("/g/2"), Record: rec("2", 1, 1, 2)},
	} {
		wg.Add(1)
		s.Submit(c, func(err error) { errs[i] = err; wg.Done() })
	}
	errs[2] = s.Adopt(ctx, Adoption{From: []byte("/g/none"), To: []byte("/g/3"), Record: rec("3", 1, 1, 3)})
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ErrConflict) {
		t.Fatalf("errors %v, want nil, nil, a conflict", errs)
	}
	if got := listAll(t, s); !slices.Equal(got, []string{"/g/1", "/g/2"}) {
		t.Fatalf("index %q", got)
	}
}

// Forget drops the records outside the roots at or below a directory and
// leaves the roots' subtrees alone; a dry run only counts.
func TestForget(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for i, p := range []string{"/home/u/a", "/home/u/root/in", "/home/u/old/x", "/home/u/old/y/z", "/srv/o", "/home/v/w"} {
		mustPut(t, s, p, rec(p, 1, 1, uint64(i+1)))
	}
	roots := [][]byte{[]byte("/home/u/root")}
	if n, err := s.Forget(ctx, []byte("/home/u"), roots, true); err != nil || n != 3 {
		t.Fatalf("dry Forget = %d, %v; want 3", n, err)
	}
	if len(listAll(t, s)) != 6 {
		t.Fatal("a dry run dropped records")
	}
	if n, err := s.Forget(ctx, []byte("/home/u"), roots, false); err != nil || n != 3 {
		t.Fatalf("Forget = %d, %v; want 3", n, err)
	}
	if n, err := s.Forget(ctx, []byte("/srv"), roots, false); err != nil || n != 1 {
		t.Fatalf("Forget of a directory without roots = %d, %v; want 1", n, err)
	}
	if got, want := listAll(t, s), []string{"/home/u/root/in", "/home/v/w"}; !slices.Equal(got, want) {
		t.Fatalf("after Forget: %q, want %q", got, want)
	}
}
