package indexer

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
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
	pastRacyTick() // else the scan leaves them to a later check
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	if got := e.h.openedCount(); got != n {
		t.Errorf("the first scan hashed %d files it opened itself, want %d", got, n)
	}
	if held := e.ix.check.dirs.held(); held != 0 {
		t.Errorf("the idle indexer holds %d directories open", held)
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

// The last merge of a scan's digest entries runs while its last file, a
// large one, is still being hashed, not after it: once no walk runs and
// fewer changes are on their way than a deferring group holds, the
// pipeline asks the store to settle. Changes arriving every 20 ms keep the
// writer from its idle merge meanwhile, so the hint alone can merge.
func TestLastMergeRunsWhileLargeFilesHash(t *testing.T) {
	root := t.TempDir()
	const small = 1500
	for i := range small {
		writeOld(t, filepath.Join(root, fmt.Sprintf("s%d/f%d", i%10, i)), fmt.Sprint("small ", i))
	}
	big := filepath.Join(root, "big.bin")
	writeOld(t, big, strings.Repeat("z", 1<<20))
	h := &countingHasher{n: make(map[string]int)}
	entered, release := h.hold(big)
	var log syncBuffer
	e := newEnv(t, root, envOpts{noWatch: true, h: h, store: &store.Options{NoSync: true,
		MaxDelay: 3 * time.Second, MaxIdle: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))}})
	<-entered
	stop := make(chan struct{})
	trickled := make(chan struct{})
	var once sync.Once
	end := func() { // before the env stops (cleanups run last first)
		once.Do(func() {
			close(stop)
			<-trickled
			close(release)
		})
	}
	t.Cleanup(end)
	go func() {
		defer close(trickled)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			path := fmt.Appendf(nil, "/elsewhere/f%d", i)
			d := sha256.Sum256(path)
			r := store.Record{Backend: key.SHA256E, Digest: d[:], Size: int64(i), Ino: uint64(i + 1)}
			e.st.Submit(store.Change{Op: store.OpPut, Path: path, Record: r}, func(error) {})
		}
	}()
	waitFor(t, "the scan's digest entries merged while its large file is hashed", func() bool {
		st, err := e.st.Stats()
		// Not Ungrouped == 0: the trickle adds an entry every 20 ms, and
		// a loaded machine rarely samples the instant after a merge. The
		// scan's own 1,500 entries merged leave fewer than that pending.
		return err == nil && st.Digested >= small && st.Ungrouped < small &&
			strings.Contains(log.String(), "merged pending digest entries")
	})
	end()
	e.settle(settleTimeout)
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
