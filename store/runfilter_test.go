package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// Every prefix added is found again, across the filter's growth, and few
// that were not are.
func TestRunFilterFindsWhatItHolds(t *testing.T) {
	f := newRunFilter(0)
	const n = 100_000 // past several doublings of filterFirstCap
	for i := range uint64(n) {
		f.add(codec.InodeKey(nil, 1, i))
	}
	if got := len(*f.blooms.Load()); got < 3 {
		t.Fatalf("%d filters after %d entries, want the filter to have grown", got, n)
	}
	for i := range uint64(n) {
		if !f.mayHold(codec.InodeKey(nil, 1, i)) {
			t.Fatalf("inode %d added but not found", i)
		}
	}
	fp := 0
	for i := range uint64(n) {
		if f.mayHold(codec.InodeKey(nil, 2, i)) {
			fp++
		}
	}
	// Each filter alone gives about 1 %; the lookup tests all of them.
	if fp > n/20 {
		t.Errorf("%d of %d absent inodes may be held, want under 5 %%", fp, n)
	}
}

func TestInodePrefixLen(t *testing.T) {
	for _, c := range []struct{ dev, ino uint64 }{{0, 0}, {1, 255}, {1 << 40, 1<<64 - 1}} {
		k := append(codec.InodeKey(nil, c.dev, c.ino), codec.IDKey(7)...)
		if got, want := inodePrefixLen(k), len(codec.InodeKey(nil, c.dev, c.ino)); got != want {
			t.Errorf("inodePrefixLen(%x) = %d, want %d", k, got, want)
		}
	}
	for _, k := range [][]byte{nil, {9}, {1}, {1, 5, 2, 0}} {
		if got := inodePrefixLen(k); got != 0 {
			t.Errorf("inodePrefixLen(%x) = %d, want 0", k, got)
		}
	}
}

// deferredStore is a store whose every group defers, merging only when
// asked, with n records on inodes 1…n of device 1 waiting in a run.
func deferredStore(t *testing.T, n int) (*Store, string) {
	path := filepath.Join(t.TempDir(), "index.db")
	s := openTestAt(t, path, Options{NoSync: true, MaxDelay: time.Second, MaxIdle: 200 * time.Millisecond,
		deferAt: 1, mergeIdle: time.Hour})
	putInodes(t, s, 1, n)
	return s, path
}

func putInodes(t *testing.T, s *Store, from, n int) {
	t.Helper()
	var cs []Change
	for i := from; i < from+n; i++ {
		cs = append(cs, Change{Op: OpPut, Path: p("/t/f%06d", i), Record: rec(fmt.Sprint("c", i), 10, 1, uint64(i))})
	}
	if err := s.SubmitAll(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
}

// runNumbers lists the run numbers in pendinodes.
func runNumbers(t *testing.T, s *Store) []uint64 {
	var out []uint64
	for _, k := range bucketKeys(t, s, codec.BucketPendInodes) {
		if n := binary.BigEndian.Uint64(k); len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
	}
	return out
}

// With entries waiting, a lookup of an inode no run names skips the runs,
// and one of an inode a run names finds it.
func TestInodeFilterSkipsAbsentInodes(t *testing.T) {
	s, _ := deferredStore(t, 500)
	if len(runNumbers(t, s)) == 0 {
		t.Fatal("no run waits: the test needs deferred entries")
	}
	skipped := 0
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(codec.BucketPendInodes)
		for i := range uint64(500) {
			if !s.deferred.mayHoldInode(b, codec.InodeKey(nil, 1, 1+i)) {
				t.Fatalf("inode %d waits in a run, but the filter says no run holds it", 1+i)
			}
			if !s.deferred.mayHoldInode(b, codec.InodeKey(nil, 3, 1+i)) {
				skipped++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if skipped < 450 {
		t.Errorf("%d of 500 lookups of absent inodes skipped the runs, want nearly all", skipped)
	}
	for _, i := range []uint64{1, 250, 500} {
		if got, err := s.ByInodeAll(1, i); err != nil || len(got) != 1 || string(got[0]) != string(p("/t/f%06d", i)) {
			t.Errorf("ByInodeAll(1, %d) = %q, %v", i, paths(got), err)
		}
	}
}

// A merge carries the run numbers over to the emptied bucket and renews
// the filter from there; a snapshot taken before the renewal, whose runs
// the new filter never saw, seeks in its runs.
func TestInodeFilterAcrossMerges(t *testing.T) {
	s, _ := deferredStore(t, 50)
	first := runNumbers(t, s)
	tx, err := s.db.Begin(false) // a snapshot with the runs, as a reader holds one
	if err != nil {
		t.Fatal(err)
	}
	old := tx.Bucket(codec.BucketPendInodes)
	// What the merge's renewal does, without the merge (which would wait
	// for this snapshot to grow the file): a filter from the last run on.
	s.deferred.inoFilter.Store(newRunFilter(first[len(first)-1]))
	skipped := 0
	for i := range uint64(50) {
		if !s.deferred.mayHoldInode(old, codec.InodeKey(nil, 1, 1+i)) {
			skipped++
		}
	}
	if err := tx.Rollback(); err != nil { // before any Fatal: Close waits for it
		t.Fatal(err)
	}
	if skipped > 0 {
		t.Fatalf("%d of 50 lookups in a snapshot older than the filter skipped the runs that hold them", skipped)
	}

	if err := s.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := runNumbers(t, s); len(got) != 0 {
		t.Fatalf("runs %v after the merge, want none", got)
	}
	putInodes(t, s, 1000, 50)
	later := runNumbers(t, s)
	if len(later) == 0 || later[0] <= first[len(first)-1] {
		t.Fatalf("runs %v after a merge of runs %v, want later numbers", later, first)
	}
	for _, i := range []uint64{1, 1000, 1049} {
		if got, err := s.ByInodeAll(1, i); err != nil || len(got) != 1 {
			t.Errorf("ByInodeAll(1, %d) = %q, %v, want one path", i, paths(got), err)
		}
	}
}

// Runs left by a close whose merge failed fill the filter at the next open.
func TestInodeFilterFromRunsAtOpen(t *testing.T) {
	defer func() { mergeHook = func() error { return nil } }()
	path := filepath.Join(t.TempDir(), "index.db")
	opts := Options{NoSync: true, MaxDelay: time.Second, MaxIdle: 200 * time.Millisecond, deferAt: 1,
		mergeIdle: time.Hour, mergeTx: 1}
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	putInodes(t, s, 1, 40)
	mergeHook = func() error { return errors.New("cut") } // the writer's stop and Close merge
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mergeHook = func() error { return nil }

	// No writer: its start would merge what waits.
	if s, err = Open(path, Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(runNumbers(t, s)) == 0 {
		t.Fatal("no run left after the cut merge: the test needs some")
	}
	for i := range uint64(40) {
		if got, err := s.ByInodeAll(1, 1+i); err != nil || len(got) != 1 {
			t.Fatalf("ByInodeAll(1, %d) after reopen = %q, %v, want one path", 1+i, paths(got), err)
		}
	}
}
