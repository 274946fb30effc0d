package indexer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// writeLarge makes a sparse file of size bytes with an mtime an hour ago.
func writeLarge(t *testing.T, p string, size int64) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	f, err := os.Create(p)
	must(t, err)
	must(t, f.Truncate(size))
	must(t, f.Close())
	old := time.Now().Add(-time.Hour)
	must(t, os.Chtimes(p, old, old))
}

// earlyTree writes n small files under a/ and one file of earlyMin bytes
// under z/, which the scan's walk meets last; it returns the large file's
// path and the tree's size.
func earlyTree(t *testing.T, root string, n int) (string, int64) {
	var total int64
	for i := range n {
		c := fmt.Sprint("small ", i)
		writeOld(t, filepath.Join(root, fmt.Sprintf("a/f%05d", i)), c)
		total += int64(len(c))
	}
	big := filepath.Join(root, "z/big.bin")
	writeLarge(t, big, earlyMin)
	return big, total + earlyMin
}

// checkEarly checks, once the scan is done, that every file was hashed
// once, the large one queued ahead of the walk, and that the scan counted
// each file once in what it saw.
func checkEarly(t *testing.T, e *env, big string, n int, total int64) {
	t.Helper()
	e.settle(settleTimeout)
	if got := e.h.count(big); got != 1 {
		t.Errorf("the large file was hashed %d times, want once", got)
	}
	if got := e.h.total(); got != n+1 {
		t.Errorf("%d hashes, want %d", got, n+1)
	}
	if got := e.ix.m.early.Load(); got != 1 {
		t.Errorf("%d files queued ahead of the walk, want 1", got)
	}
	want := totals{Files: int64(n) + 1, Bytes: total}
	waitFor(t, "the scan's totals", func() bool {
		b, ok, err := e.st.GetMeta(totalsMeta)
		var got map[string]totals
		return err == nil && ok && json.Unmarshal(b, &got) == nil && got[e.root] == want
	})
	if p := e.ix.Progress(); p.BytesSeen != total || p.FilesSeen != int64(n)+1 {
		t.Errorf("seen %d files, %d bytes; want %d, %d", p.FilesSeen, p.BytesSeen, n+1, total)
	}
}

// The counting walk queues a large file ahead of the scan's walk; the walk
// meets it while it is still being hashed, and the one more check that
// asks for settles it without hashing it again.
func TestLargeFileHashedAheadOfTheWalk(t *testing.T) {
	root := t.TempDir()
	const n = 4000
	big, total := earlyTree(t, root, n)
	h := &countingHasher{n: make(map[string]int)}
	entered, release := h.hold(big)
	open := sync.OnceFunc(func() { close(release) })
	e := newEnv(t, root, envOpts{h: h, noWatch: true, opts: Options{MaxPending: 8, WalkWorkers: 1}})
	t.Cleanup(open) // before the indexer stops, when the test fails
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the large file was not hashed")
	}
	if seen := e.ix.Progress().FilesSeen; seen > n {
		t.Fatalf("the walk had met all %d files when the large one began to be hashed: not ahead of it", seen)
	}
	waitFor(t, "the walk to meet the large file", func() bool { return e.ix.Progress().FilesSeen == n+1 })
	open()
	checkEarly(t, e, big, n, total)
}

// The large file queued ahead of the walk is hashed and recorded before
// the walk meets it; the walk's check finds its record current.
func TestLargeFileRecordedBeforeTheWalkMeetsIt(t *testing.T) {
	root := t.TempDir()
	const n = 4000
	big, total := earlyTree(t, root, n)
	h := &countingHasher{n: make(map[string]int)}
	entered, release := h.hold(filepath.Join(root, "a/f00000")) // holds one of two workers
	open := sync.OnceFunc(func() { close(release) })
	e := newEnv(t, root, envOpts{h: h, noWatch: true, opts: Options{MaxPending: 8, WalkWorkers: 1, Workers: 2}})
	t.Cleanup(open) // before the indexer stops, when the test fails
	<-entered
	waitFor(t, "the large file's record", func() bool {
		_, ok, err := e.st.Get([]byte(big))
		return err == nil && ok
	})
	if seen := e.ix.Progress().FilesSeen; seen > n {
		t.Fatalf("the walk had met all %d files when the large one was recorded: not ahead of it", seen)
	}
	open()
	checkEarly(t, e, big, n, total)
}
