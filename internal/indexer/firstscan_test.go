package indexer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annexd/annexd/fsstat"
)

// A first scan into an empty index does not stat the files it walks: each
// is opened, and the identity of its descriptor is what the record holds,
// the same as an lstat of the file. The files' sizes still count in what
// the scan saw (the totals the next scan expects). A scan of an index with
// records stats instead, and opens nothing that is unchanged.
func TestFirstScanOpensInsteadOfStat(t *testing.T) {
	root := t.TempDir()
	const n = 60
	var total int64
	for i := range n {
		c := strings.Repeat("y", i*97)
		writeOld(t, filepath.Join(root, fmt.Sprintf("d%d/f%d", i%4, i)), c)
		total += int64(len(c))
	}
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	if got := e.h.openedCount(); got != n {
		t.Errorf("the first scan hashed %d files it opened itself, want %d", got, n)
	}
	for i := range n {
		p := filepath.Join(root, fmt.Sprintf("d%d/f%d", i%4, i))
		rec, ok, err := e.st.Get([]byte(p))
		fi, serr := fsstat.Lstat(p)
		if err != nil || serr != nil || !ok {
			t.Fatalf("%s: record %v %v, lstat %v", p, ok, err, serr)
		}
		if rec.Identity() != identity(fi) {
			t.Errorf("%s: recorded identity %+v, lstat %+v", p, rec.Identity(), identity(fi))
		}
	}
	want := totals{Files: n, Bytes: total}
	waitFor(t, "the scan's totals", func() bool {
		b, ok, err := e.st.GetMeta(totalsMeta)
		var got map[string]totals
		return err == nil && ok && json.Unmarshal(b, &got) == nil && got[root] == want
	})
	if p := e.ix.Progress(); p.BytesSeen != total {
		t.Errorf("bytes seen %d, want %d", p.BytesSeen, total)
	}

	// While down: a file changes, a directory of five files appears and a
	// file moves into another new directory. The next scan stats them all
	// (the index is not empty), hashes the six, and finds the move.
	moved, ok, err := e.st.Get([]byte(filepath.Join(root, "d1/f1")))
	if err != nil || !ok {
		t.Fatalf("d1/f1 before the move: record %v %v", ok, err)
	}
	e.stop()
	e.h = &countingHasher{n: make(map[string]int)}
	writeOld(t, filepath.Join(root, "d0/f0"), "changed while down")
	for i := range 5 {
		writeOld(t, filepath.Join(root, fmt.Sprintf("new/g%d", i)), fmt.Sprint("new ", i))
	}
	if err := os.MkdirAll(filepath.Join(root, "moved"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, "d1/f1"), filepath.Join(root, "moved/f1")); err != nil {
		t.Fatal(err)
	}
	e.start(envOpts{noWatch: true})
	e.settle(settleTimeout)
	if got, opened := e.h.total(), e.h.openedCount(); got != 6 || opened != 0 {
		t.Errorf("the second scan hashed %d files, %d of them opened by the indexer; want 6 and 0", got, opened)
	}
	if rec, ok, err := e.st.Get([]byte(filepath.Join(root, "moved/f1"))); err != nil || !ok || !bytes.Equal(rec.Digest, moved.Digest) {
		t.Errorf("moved/f1: record %v %v, digest %x, want the moved file's %x", ok, err, rec.Digest, moved.Digest)
	}
}

// A file already in the pipeline when a walk into the empty index reaches
// it (being hashed for an earlier scan) still counts its size in what the
// walk saw, though the check the walk waits for does not open it.
func TestUnstatedFileAlreadyQueuedIsSized(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "x")
	writeOld(t, p, strings.Repeat("z", 5000))
	h := &countingHasher{n: make(map[string]int)}
	entered, release := h.hold(p)
	e := newEnv(t, root, envOpts{h: h, noWatch: true})
	<-entered
	e.ix.Rescan(root) // walks while x is held: the index is still empty
	waitFor(t, "the second scan to wait for x", func() bool {
		pend := e.ix.pipe.pend
		pend.mu.Lock()
		defer pend.mu.Unlock()
		en, ok := pend.m[p]
		return ok && len(en.againScans) == 1
	})
	close(release)
	e.settle(settleTimeout)
	want := totals{Files: 1, Bytes: 5000}
	waitFor(t, "the scans' totals", func() bool {
		b, ok, err := e.st.GetMeta(totalsMeta)
		var got map[string]totals
		return err == nil && ok && json.Unmarshal(b, &got) == nil && got[root] == want
	})
	if p := e.ix.Progress(); p.BytesSeen != 2*5000 {
		t.Errorf("bytes seen %d over two scans, want %d", p.BytesSeen, 2*5000)
	}
}
