package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A writable index is mapped well ahead of its file: a read transaction
// held open (a long lookup, a dups listing) does not stall the writer while
// the file grows, as bbolt's remap would, and the file itself grows only as
// pages are written, in bbolt's steps, not to the size of the map.
func TestReaderDoesNotStallGrowth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s := openTestAt(t, path, Options{NoSync: true})
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	cs := make([]Change, 20000)
	for i := range cs {
		cs[i] = Change{Op: OpPut, Path: p("/d%d/file-with-a-longish-name-%d", i%97, i), Record: rec(string(p("%d", i)), int64(i), 1, uint64(i+1))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.SubmitAll(ctx, cs); err != nil {
		t.Fatalf("writes with a read transaction open: %v", err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if after.Size() < 8*before.Size() {
		t.Fatalf("the index grew from %d to %d bytes only: the test did not make bbolt outgrow its first map", before.Size(), after.Size())
	}
	if after.Size() >= initialMapSize/16 {
		t.Fatalf("the index file is %d bytes: the map made it grow", after.Size())
	}
	if len(s.in) != 0 {
		t.Fatalf("the writer's queue holds %d changes after they were committed", len(s.in))
	}
}
