package indexer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWalksWaitBeforeEachDirectory: a first scan, its count included,
// reads no directory before Watches.WaitWatched lets it (the daemon waits
// there for the directory's watch), while the walk of the rest of the
// tree goes on.
func TestWalksWaitBeforeEachDirectory(t *testing.T) {
	root := t.TempDir()
	for i := range 40 {
		writeOld(t, filepath.Join(root, fmt.Sprintf("d%d/f%d", i%4, i)), fmt.Sprint("content ", i))
	}
	held := filepath.Join(root, "d2")
	big := filepath.Join(held, "big") // one the count would queue ahead of the walk
	f, err := os.Create(big)
	must(t, err)
	must(t, f.Truncate(earlyMin))
	must(t, f.Close())

	var mu sync.Mutex
	calls := map[string]int{}
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open()
	before := func(ctx context.Context, dir string) error {
		mu.Lock()
		calls[dir]++
		mu.Unlock()
		if dir != held {
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e := newEnv(t, root, envOpts{noWatch: true, opts: Options{Watches: watchStub{before: before}}})
	// The walk meets the 30 files of the other directories; it hands them
	// to the checkers in batches, so they may wait for d2 to be hashed.
	waitFor(t, "the walk going on while d2 waits", func() bool {
		w := e.ix.Progress().Walk
		return w != nil && w.Files == 30
	})
	for p, n := range e.h.snapshot() {
		if filepath.Dir(p) == held && n > 0 {
			t.Errorf("%s hashed before its directory was let through", p)
		}
	}
	if w := e.ix.Progress().Walk; w == nil || w.Files != 30 {
		t.Errorf("walk progress %+v: want the 30 files outside d2 and none of d2's", w)
	}
	// The count's walk, which ends with the scan's, waits at d2 too before
	// d2 is let through: late on a loaded machine, it would else be cut
	// short before it gets there.
	waitFor(t, "both walks waiting at d2", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls[held] >= 2
	})
	open()
	e.settle(settleTimeout)
	mu.Lock()
	defer mu.Unlock()
	for _, d := range []string{root, filepath.Join(root, "d0"), filepath.Join(root, "d1"), held, filepath.Join(root, "d3")} {
		if calls[d] == 0 {
			t.Errorf("BeforeDir was never called for %s", d)
		}
	}
	if calls[held] < 2 {
		t.Errorf("BeforeDir called %d times for the held directory: want the count's walk and the scan's both to wait", calls[held])
	}
}

// TestRenameHashedWhileWritesUnread: while writes may be unread
// (Watches.CatchingUp: the watcher still sets up its watches), a file
// renamed since the daemon started is hashed instead of taking over its
// old record; one renamed while the daemon was down, whose ctime is older,
// and one renamed once the writes are read, take it over.
func TestRenameHashedWhileWritesUnread(t *testing.T) {
	root := t.TempDir()
	for _, n := range []string{"f", "h", "other"} {
		writeOld(t, filepath.Join(root, "d", n), "content of "+n)
	}
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	e.stop()
	must(t, os.Rename(filepath.Join(root, "d/f"), filepath.Join(root, "d/g")))
	time.Sleep(ctimeSlack + 100*time.Millisecond) // the rename's ctime is older than the next start
	e.h = &countingHasher{n: make(map[string]int)}
	var unread atomic.Bool
	unread.Store(true)
	e.start(envOpts{noWatch: true, opts: Options{Watches: watchStub{unread: unread.Load}}})
	e.settle(settleTimeout)
	if n := e.h.count(filepath.Join(root, "d/g")); n != 0 {
		t.Errorf("the file renamed while the daemon was down was hashed %d times, want its record taken over", n)
	}
	rename := func(from, to string) {
		must(t, os.Rename(filepath.Join(root, from), filepath.Join(root, to)))
		e.ix.Rescan(root)
		e.settle(settleTimeout)
	}
	rename("d/h", "d/i")
	if e.h.count(filepath.Join(root, "d/i")) == 0 {
		t.Error("a file renamed while writes may be unread took over its old record")
	}
	unread.Store(false)
	rename("d/i", "d/j")
	if n := e.h.count(filepath.Join(root, "d/j")); n != 0 {
		t.Errorf("a file renamed once the writes were read was hashed %d times, want its record taken over", n)
	}
	if n := e.h.count(filepath.Join(root, "d/other")); n != 0 {
		t.Errorf("the unchanged file was hashed %d times", n)
	}
}
