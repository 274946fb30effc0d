package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// A fenced drop deletes what was there when the fence went up, and
// nothing once a record arrived at, under or above its path since; a
// change elsewhere, a delete or a lifted fence breaks nothing.
func TestDropFenced(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(s *Store)
		broken bool
	}{
		{"nothing", func(*Store) {}, false},
		{"put under", func(s *Store) { mustPut(t, s, "/r/d/new", rec("n", 1, 1, 9)) }, true},
		{"put at", func(s *Store) { mustPut(t, s, "/r/d", rec("n", 1, 1, 9)) }, true},
		{"put at a sibling with the path as prefix", func(s *Store) { mustPut(t, s, "/r/dd/x", rec("n", 1, 1, 9)) }, false},
		{"put elsewhere", func(s *Store) { mustPut(t, s, "/r/e/x", rec("n", 1, 1, 9)) }, false},
		{"move in", func(s *Store) {
			if _, err := s.Move(ctx, []byte("/r/x"), []byte("/r/d")); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"move elsewhere", func(s *Store) {
			if _, err := s.Move(ctx, []byte("/r/x"), []byte("/q")); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"move to a directory above", func(s *Store) {
			mustPut(t, s, "/s/d/z", rec("z", 1, 1, 4))
			if _, err := s.Move(ctx, []byte("/s"), []byte("/r")); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"mark under", func(s *Store) {
			if err := s.wait(ctx, item{c: Change{Op: OpMark, Path: []byte("/r/d/a"), Gen: 7}}); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"delete under", func(s *Store) {
			if err := s.DeleteSubtree(ctx, []byte("/r/d/a")); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"seen under", func(s *Store) { s.Saw("/r/d/a") }, true},
		{"seen above", func(s *Store) { s.Saw("/r") }, true},
		{"seen at /", func(s *Store) { s.Saw("/") }, true},
		{"seen elsewhere", func(s *Store) { s.Saw("/r/dd") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t)
			mustPut(t, s, "/r/d/a", rec("a", 1, 1, 1))
			mustPut(t, s, "/r/d/b", rec("b", 1, 1, 2))
			mustPut(t, s, "/r/x/c", rec("c", 1, 1, 3))
			f := s.Fence([]byte("/r/d"))
			tc.change(s)
			n, err := s.DropFenced(ctx, f, nil)
			f.Lift()
			var ce *ConflictError
			switch {
			case tc.broken && (!errors.As(err, &ce) || string(ce.Path) != "/r/d"):
				t.Fatalf("drop after %s: %v, want a conflict at /r/d", tc.name, err)
			case tc.broken:
				if _, ok, _ := s.Get([]byte("/r/d/b")); !ok {
					t.Error("a broken fence's drop deleted /r/d/b")
				}
			case err != nil:
				t.Fatalf("drop after %s: %v", tc.name, err)
			case n < 1:
				t.Errorf("drop removed %d records, want the records under /r/d", n)
			default:
				if _, ok, _ := s.Get([]byte("/r/d/b")); ok {
					t.Error("/r/d/b is still there after the drop")
				}
			}
		})
	}
}

// A lifted fence no longer breaks, and others stay raised.
func TestFenceLift(t *testing.T) {
	s := openTest(t)
	a, b := s.Fence([]byte("/a")), s.Fence([]byte("/b"))
	a.Lift()
	s.Saw("/a/x")
	s.Saw("/b/x")
	if a.Broken() || !b.Broken() {
		t.Errorf("broken: lifted %v, raised %v; want false, true", a.Broken(), b.Broken())
	}
	b.Lift()
	if s.fenceSet.active() {
		t.Error("fences active after both were lifted")
	}
}

// A caller that reads a record after Saw never reads around a fenced drop
// that is applied and not yet committed: Saw waits for the commit, and the
// read then finds the record gone (its caller hashes the file instead of
// keeping a record that the commit deletes).
func TestSawWaitsForAnAppliedDrop(t *testing.T) {
	s := openTest(t)
	mustPut(t, s, "/r/d/a", rec("a", 1, 1, 1))
	got := make(chan bool, 1)
	testHookApplied = func() {
		if !s.fenceSet.active() {
			return
		}
		testHookApplied = nil
		go func() {
			s.Saw("/r/d/a")
			_, ok, err := s.Get([]byte("/r/d/a"))
			if err != nil {
				t.Error(err)
			}
			got <- ok
		}()
		// Until the reader is inside Saw, waiting for this group's commit.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			s.fenceSet.mu.Lock()
			n := s.fenceSet.waiting
			s.fenceSet.mu.Unlock()
			if n == 1 {
				return
			}
		}
		t.Error("Saw did not wait for the commit of the drop applied before it")
	}
	t.Cleanup(func() { testHookApplied = nil })
	f := s.Fence([]byte("/r/d"))
	if _, err := s.DropFenced(context.Background(), f, nil); err != nil {
		t.Fatal(err)
	}
	if <-got {
		t.Error("a read after Saw found the record that the drop applied meanwhile deletes")
	}
}

// A sweep's delete is skipped when its path was touched after the sweep
// looked: here a directory moved in under the name whose stale record the
// sweep let go, and a Saw of another stale path. What nobody touched goes.
func TestSweepFencedSparesWhatWasTouched(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	mustPut(t, s, "/r/d/f", rec("old f", 1, 1, 1))
	mustPut(t, s, "/r/e", rec("e", 1, 1, 2))
	mustPut(t, s, "/r/g", rec("g", 1, 1, 3))
	mustPut(t, s, "/x/f", rec("new f", 1, 1, 4))
	gen, err := s.NextGeneration(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.SweepFenced(ctx, []byte("/r"), gen, func(p []byte, _ *Record) bool {
		switch string(p) {
		case "/r/d/f": // gone at this look; then d is dropped and x moved in as d
			if err := s.DeleteSubtree(ctx, []byte("/r/d")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Move(ctx, []byte("/x"), []byte("/r/d")); err != nil {
				t.Fatal(err)
			}
		case "/r/e":
			s.Saw("/r/e")
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"/r/d/f": true, "/r/e": true, "/r/g": false}
	for p, kept := range want {
		if _, ok, _ := s.Get([]byte(p)); ok != kept {
			t.Errorf("%s: present %v after the sweep, want %v", p, ok, kept)
		}
	}
	if n != 1 {
		t.Errorf("sweep removed %d, want 1 (/r/g)", n)
	}
	if r, _, _ := s.Get([]byte("/r/d/f")); r.Ino != 4 {
		t.Errorf("/r/d/f holds inode %d, want the moved record's 4", r.Ino)
	}
}

// A sweep's fence forgets each delete once its group ended: a sweep of
// many records holds no more than a group's worth of them.
func TestSweepFenceForgetsEndedGroups(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	var cs []Change
	for i := range 5000 {
		cs = append(cs, Change{Op: OpPut, Path: p("/r/f%d", i), Record: rec(fmt.Sprint(i), 1, 1, uint64(i+1))})
	}
	if err := s.SubmitAll(ctx, cs); err != nil {
		t.Fatal(err)
	}
	gen, err := s.NextGeneration(ctx)
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	testHookApplied = func() {
		s.fenceSet.mu.Lock()
		for f := range s.fenceSet.m { // the sweep's fence is the only one
			most = max(most, len(f.applied))
		}
		s.fenceSet.mu.Unlock()
	}
	t.Cleanup(func() { testHookApplied = nil })
	n, err := s.SweepFenced(ctx, []byte("/r"), gen, nil)
	if err != nil || n != 5000 {
		t.Fatalf("sweep removed %d, %v; want 5000", n, err)
	}
	if most == 0 || most >= 5000 {
		t.Errorf("the fence held %d applied deletes at most; want one group's, fewer than 5000", most)
	}
}
