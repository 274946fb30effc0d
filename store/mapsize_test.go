package store

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// A writable index is mapped well ahead of its file: a read transaction
// held open (a long lookup, a dups listing) does not stall the writer while
// the file grows, as bbolt's remap would, and the file itself grows only as
// pages are written, in bbolt's steps, not to the size of the map.
func TestReaderDoesNotStallGrowth(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("a 32-bit build maps the index as bbolt does by default")
	}
	path := filepath.Join(t.TempDir(), "index.db")
	s := openTestAt(t, path, Options{NoSync: true})
	before, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	// A stalled writer blocks the submitter on a full queue, whatever the
	// context says: the transaction ends at the deadline, so the test fails
	// rather than hangs.
	end := time.AfterFunc(30*time.Second, func() { _ = tx.Rollback() })
	defer func() {
		if end.Stop() {
			_ = tx.Rollback()
		}
	}()
	cs := make([]Change, 20000)
	for i := range cs {
		cs[i] = Change{Op: OpPut, Path: p("/d%d/file-with-a-longish-name-%d", i%97, i), Record: rec(string(p("%d", i)), int64(i), 1, uint64(i+1))}
	}
	start := time.Now()
	if err := s.SubmitAll(context.Background(), cs); err != nil {
		t.Fatalf("writes with a read transaction open: %v", err)
	}
	if took := time.Since(start); took >= 30*time.Second {
		t.Fatalf("the writes waited %v, until the read transaction ended", took)
	}
	after, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if after.IndexBytes < 64*before.IndexBytes {
		t.Fatalf("the index's pages grew from %d to %d bytes only: the test did not make bbolt outgrow a default first map", before.IndexBytes, after.IndexBytes)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pages %d → %d bytes, file %d bytes", before.IndexBytes, after.IndexBytes, fi.Size())
	if fi.Size() >= initialMapSize/16 {
		t.Fatalf("the index file is %d bytes for %d bytes of pages: the map made it grow", fi.Size(), after.IndexBytes)
	}
	if n := s.q.len(); n != 0 {
		t.Fatalf("the writer's queue holds %d changes after they were committed", n)
	}
}
