package indexer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/internal/testutil"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
	"github.com/annexd/annexd/watcher"
)

// countingHasher is the real hasher, counting the hashes it completed per
// path.
type countingHasher struct {
	h      *hasher.Hasher
	mu     sync.Mutex
	n      map[string]int
	opened int               // hashes of files the indexer opened itself (HashOpen)
	gate   func(path string) // if set, called before each hash (tests hold a path in the pipeline)
}

func (c *countingHasher) HashStat(ctx context.Context, path string, b key.Backend, before fsstat.FileInfo) (hasher.Result, error) {
	c.enter(path)
	r, err := c.h.HashStat(ctx, path, b, before)
	c.counted(path, err)
	return r, err
}

func (c *countingHasher) HashOpen(ctx context.Context, f *hasher.File, b key.Backend) (hasher.Result, error) {
	path := f.Path()
	c.enter(path)
	r, err := c.h.HashOpen(ctx, f, b)
	c.counted(path, err)
	if err == nil {
		c.mu.Lock()
		c.opened++
		c.mu.Unlock()
	}
	return r, err
}

// openedCount is how many hashes were of files the indexer opened.
func (c *countingHasher) openedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opened
}

// enter runs the gate, if any, for path.
func (c *countingHasher) enter(path string) {
	c.mu.Lock()
	gate := c.gate
	c.mu.Unlock()
	if gate != nil {
		gate(path)
	}
}

// counted counts a hash of path that completed.
func (c *countingHasher) counted(path string, err error) {
	if err == nil {
		c.mu.Lock()
		c.n[path]++
		c.mu.Unlock()
	}
}

// hold makes the first hash of path wait: entered is closed when it
// starts, and it goes on once the caller closes release.
func (c *countingHasher) hold(path string) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate = func(p string) {
		if p == path {
			once.Do(func() { close(entered) })
			<-release
		}
	}
	return entered, release
}

func (c *countingHasher) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[path]
}

func (c *countingHasher) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, n := range c.n {
		t += n
	}
	return t
}

// snapshot returns the hash count of every path so far.
func (c *countingHasher) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// hashedSince lists the paths hashed since snap, for failure messages.
func (c *countingHasher) hashedSince(snap map[string]int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for p, n := range c.n {
		if n > snap[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// env is a running indexer over a temp root, with a real store, hasher and
// (unless noWatch) watcher.
type env struct {
	t      *testing.T
	root   string
	index  string
	st     *store.Store
	h      *countingHasher
	ix     *Indexer
	w      *watcher.Watcher
	cancel context.CancelFunc
	done   chan struct{}
	pause  chan bool // the hand-off stops taking watcher events while paused
	src    *pausable
	// kept maps the paths whose records must keep a digest, flagged
	// (corrupt or untraced), to that digest: their bytes changed with no
	// witness.
	kept map[string][]byte
	// found holds the findings the indexer reported, by path.
	found *findings
	// led is the write ledger the watcher records into (nil: no watcher).
	led *ledger.Ledger
}

// findings records what Options.OnFinding hears.
type findings struct {
	mu sync.Mutex
	by map[string][]Finding
}

func (f *findings) add(x Finding) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.by[x.Path] = append(f.by[x.Path], x)
}

// kinds returns the kinds found for each path, in order.
func (f *findings) kinds() map[string][]FindingKind {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]FindingKind{}
	for p, xs := range f.by {
		for _, x := range xs {
			out[p] = append(out[p], x.Kind)
		}
	}
	return out
}

// keep makes settle expect path's record flagged with the digest of
// content.
func (e *env) keep(path, content string) {
	if e.kept == nil {
		e.kept = map[string][]byte{}
	}
	d := sha256.Sum256([]byte(content))
	e.kept[path] = d[:]
}

type envOpts struct {
	h       *countingHasher // the hasher to start with; nil: a new one
	noWatch bool
	noScan  bool // with noWatch: no first scan either; the test asks for each check (Changed)
	quiet   time.Duration
	opts    Options
	store   *store.Options // nil: no sync, groups of at most 5 ms
	trace   bool           // log at debug level, shown if the test fails
}

func newEnv(t *testing.T, root string, eo envOpts) *env {
	t.Helper()
	if root == "" {
		root = t.TempDir()
	}
	e := &env{t: t, root: root, index: filepath.Join(t.TempDir(), "index.db"), done: make(chan struct{}), pause: make(chan bool), h: eo.h,
		found: &findings{by: map[string][]Finding{}}}
	e.start(eo)
	return e
}

func (e *env) start(eo envOpts) {
	t := e.t
	so := store.Options{NoSync: true, MaxDelay: 5 * time.Millisecond}
	if eo.store != nil {
		so = *eo.store
	}
	st, err := store.Open(e.index, so)
	if err != nil {
		t.Fatal(err)
	}
	e.st = st
	if e.h == nil {
		e.h = &countingHasher{n: make(map[string]int)}
	}
	e.h.h = hasher.New(hasher.DefaultPolicy(), nil)
	o := eo.opts
	o.Roots = []string{e.root}
	if e.found == nil {
		e.found = &findings{by: map[string][]Finding{}}
	}
	if o.OnFinding == nil {
		o.OnFinding = e.found.add
	}
	// The production delay: a rename's new path must take over the old
	// record before the removal drops it, even on a loaded machine.
	o.RemoveDelay = 2 * time.Second
	var w *watcher.Watcher
	if !eo.noWatch {
		quiet := eo.quiet
		if quiet == 0 {
			quiet = 200 * time.Millisecond
		}
		led := ledger.New()
		e.led = led
		// As the daemon runs them: the first scan beside the set-up of
		// the watches, each directory read once it is watched.
		w, err = watcher.New([]string{e.root}, watcher.Options{Quiet: quiet, OverflowBackoff: 100 * time.Millisecond,
			SyncDir: t.TempDir(), Writes: led, EarlyInitialRescan: true})
		if err != nil {
			t.Fatal(err)
		}
		o.Ledger = led
		if o.Watches == nil {
			o.Watches = w
		}
	}
	if eo.trace && o.Logger == nil {
		o.Logger = traceLog(t)
	}
	ix, err := New(st, e.h, o)
	if err != nil {
		t.Fatal(err)
	}
	e.ix = ix
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan struct{})
	var wg sync.WaitGroup
	storeCtx, stopStore := context.WithCancel(context.Background())
	storeDone := make(chan struct{})
	go func() {
		defer close(storeDone)
		if err := st.Run(storeCtx); err != nil {
			t.Errorf("store.Run: %v", err)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := ix.Run(ctx); err != nil {
			t.Errorf("indexer.Run: %v", err)
		}
	}()
	if w != nil {
		e.w = w
		e.src = newPausable(ctx, w, e.pause)
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil {
				t.Errorf("watcher.Run: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			if err := ix.Follow(ctx, e.src); err != nil {
				t.Errorf("indexer.Follow: %v", err)
			}
		}()
	} else if !eo.noScan {
		ix.Rescan(e.root)
	}
	go func() {
		wg.Wait()
		stopStore()
		<-storeDone
		close(e.done)
	}()
	t.Cleanup(e.stop)
}

// pausable is the watcher as a Source whose events stop flowing while
// paused: the watcher then blocks on sending and stops reading inotify.
type pausable struct {
	*watcher.Watcher
	out   chan watcher.Event
	taken atomic.Uint64 // events taken from the watcher's channel
}

func newPausable(ctx context.Context, w *watcher.Watcher, pause <-chan bool) *pausable {
	p := &pausable{Watcher: w, out: make(chan watcher.Event)}
	go func() {
		defer close(p.out)
		in := w.Events()
		for {
			select {
			case paused := <-pause:
				in = w.Events()
				if paused {
					in = nil
				}
			case ev, ok := <-in:
				if !ok {
					return
				}
				p.taken.Add(1)
				select {
				case p.out <- ev:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return p
}

func (p *pausable) Events() <-chan watcher.Event { return p.out }

// watcherBlocked reports whether the watcher is stuck sending: its channel
// is full and one more event is on its way. Events the watcher counted
// before a pause may still sit in the channel, so the count is against
// what the hand-off took, not against a count read at the pause.
func (e *env) watcherBlocked() bool {
	return e.w.Emitted()-e.src.taken.Load() > uint64(cap(e.w.Events()))
}

// blockWatcher holds the watcher blocked on its full channel, so that it
// reads nothing from inotify until e.pause <- false, however loaded the
// machine: what happens meanwhile reaches the watcher later, in the
// kernel's order. The files it writes for that go to a folder "flood".
func (e *env) blockWatcher() {
	e.t.Helper()
	dir := filepath.Join(e.root, "flood")
	sent := e.w.Emitted()
	must(e.t, os.MkdirAll(dir, 0o755))
	// Files made while the new folder is pending would fold into its
	// Rescan; once that is sent, each file is an event of its own.
	waitFor(e.t, "the new folder settles", func() bool { return e.w.Emitted() > sent })
	e.pause <- true
	for i := range 2 * cap(e.w.Events()) {
		must(e.t, os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), nil, 0o644))
	}
	waitFor(e.t, "the watcher blocks on its full channel", e.watcherBlocked)
}

// stop shuts everything down, checks the index and closes it.
func (e *env) stop() {
	if e.st == nil {
		return
	}
	e.cancel()
	select {
	case <-e.done:
	case <-time.After(20 * time.Second):
		e.t.Error("shutdown took longer than 20 s")
	}
	rep, err := e.st.Check()
	if err != nil || !rep.OK() {
		e.t.Errorf("index check: %v %v", err, rep.Problems)
	}
	e.h.h.Close()
	if err := e.st.Close(); err != nil {
		e.t.Errorf("store close: %v", err)
	}
	e.st = nil
}

// truth returns the sha256 of every regular file under root.
func truth(t *testing.T, root string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		out[p] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mismatch is how the index differs from the tree.
type mismatch struct {
	problems           []string
	lost, extra, wrong int // files without a record, records without a file, other wrong records
}

// compare compares the index with the tree.
func (e *env) compare() mismatch {
	want := truth(e.t, e.root)
	var m mismatch
	got := map[string]bool{}
	err := e.st.Subtree(context.Background(), []byte(e.root), func(p []byte, r store.Record) error {
		path := string(p)
		got[path] = true
		w, ok := want[path]
		kept, keep := e.kept[path]
		switch {
		case !ok:
			m.extra++
			m.problems = append(m.problems, "extra record "+path)
		case keep && (!r.State.Flagged() || !bytes.Equal(r.Digest, kept)):
			m.wrong++
			m.problems = append(m.problems, fmt.Sprintf("%s: state %v, digest %x; want the key kept, flagged", path, r.State, r.Digest))
		case keep:
		case r.State != store.StateOK:
			m.wrong++
			m.problems = append(m.problems, fmt.Sprintf("%s: state %v", path, r.State))
		case !bytes.Equal(r.Digest, w[:]):
			m.wrong++
			m.problems = append(m.problems, path+": wrong digest")
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	for p := range want {
		if !got[p] {
			m.lost++
			m.problems = append(m.problems, "missing record "+p)
		}
	}
	sort.Strings(m.problems)
	return m
}

// diff describes the first differences between the index and the tree.
func (e *env) diff() string {
	problems := e.compare().problems
	if len(problems) > 5 {
		problems = append(problems[:5], fmt.Sprintf("… %d more", len(problems)-5))
	}
	return strings.Join(problems, "; ")
}

// settle waits until everything done to the tree so far is in the index:
// the watcher has read every event from before the call (Sync), the
// indexer is idle, watcher and hand-off included, and the index matches
// the tree.
func (e *env) settle(timeout time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if e.w != nil {
		if err := e.w.Sync(ctx); err != nil {
			e.t.Fatalf("watcher sync: %v", err)
		}
	}
	last := "not idle"
	for {
		if err := e.ix.WaitIdle(ctx); err != nil {
			break
		}
		if last = e.diff(); last == "" {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
			continue
		}
		break
	}
	e.t.Fatalf("index does not match the tree after %v: %s (progress %+v)", timeout, last, e.ix.Progress())
}

// waitForLimit bounds waitFor. A scan of a few thousand files under the
// race detector beside two busy loops and three other test packages took
// more than 20 s (TestLastMergeRunsWhileLargeFilesHash, quiet: 2 s).
const waitForLimit = time.Minute

// waitFor polls cond until it holds; after waitForLimit the test fails
// naming what.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitForLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: not yet: %s", waitForLimit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// writeOld writes a file with an mtime an hour ago.
func writeOld(t *testing.T, p, content string) {
	t.Helper()
	writeFile(t, p, content)
	old := time.Now().Add(-time.Hour)
	must(t, os.Chtimes(p, old, old))
}

// pastRacyTick waits until the files written so far have ctimes older than
// a local file system's racy tick: writeOld sets their mtimes back, but
// the racy rule goes by the ctime (store.RacilyClean), which it cannot.
func pastRacyTick() { time.Sleep(fsstat.FineGranularity + 10*time.Millisecond) }

// watchStub stands in for the watcher's set-up in tests that run none:
// each nil func waits for nothing, reports no write unread, or syncs
// nothing.
type watchStub struct {
	before func(ctx context.Context, dir string) error
	unread func() bool
	sync   func(ctx context.Context) error
}

func (w watchStub) WaitWatched(ctx context.Context, dir string) error {
	if w.before == nil {
		return nil
	}
	return w.before(ctx, dir)
}

func (w watchStub) CatchingUp() bool { return w.unread != nil && w.unread() }

func (w watchStub) Sync(ctx context.Context) error {
	if w.sync == nil {
		return nil
	}
	return w.sync(ctx)
}

// traceLog is a debug logger whose lines the test shows if it fails.
func traceLog(t *testing.T) *slog.Logger {
	w := new(testutil.Buffer)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("the indexer's log:\n" + w.String())
		}
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
