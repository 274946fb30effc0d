package watcher

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// gate holds the set-up's watch of one directory until opened, and tells
// when the set-up reached it. A test defers open: the watcher's cleanup
// waits for Run, which a gate never opened would hold forever.
type gate struct {
	dir     string
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate(dir string) *gate {
	return &gate{dir: dir, reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// hold is Options.beforeWatch: it blocks at g.dir until released.
func (g *gate) hold(d string) {
	if d == g.dir {
		close(g.reached)
		<-g.release
	}
}

func mkdirs(t *testing.T, root string, rels ...string) {
	t.Helper()
	for _, r := range rels {
		if err := os.MkdirAll(filepath.Join(root, r), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// waitAsync calls WaitWatched for dir on its own goroutine; its result
// arrives on the channel.
func waitAsync(ctx context.Context, w *Watcher, dir string) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- w.WaitWatched(ctx, dir) }()
	return ch
}

// notYet fails if ch delivers within a while: the wait for what returned
// too soon.
func notYet(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("the wait for %s returned (%v) too soon", what, err)
	case <-time.After(100 * time.Millisecond):
	}
}

func returned(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("the wait for %s: %v", what, err)
		}
	case <-time.After(waitLong):
		t.Fatalf("the wait for %s did not return", what)
	}
}

// TestEarlyInitialRescan: with EarlyInitialRescan the initial Rescan comes
// before any watch is added, WaitWatched holds a directory until the
// set-up tried it, and a change made once it returned is an event.
func TestEarlyInitialRescan(t *testing.T) {
	root := t.TempDir()
	mkdirs(t, root, "a", "b/x/y", "c")
	b, x, y := filepath.Join(root, "b"), filepath.Join(root, "b/x"), filepath.Join(root, "b/x/y")
	atRoot, atX := newGate(root), newGate(x)
	defer atRoot.open()
	defer atX.open()
	opts := Options{EarlyInitialRescan: true, SyncDir: t.TempDir()}
	opts.beforeWatch = func(d string) { atRoot.hold(d); atX.hold(d) }
	rec := startAt(t, root, opts) // returns once the initial Rescan came
	ctx := context.Background()

	// The Rescan came while the set-up is held at the root, before any watch.
	<-atRoot.reached
	if !rec.w.CatchingUp() {
		t.Error("CatchingUp false while the set-up is held")
	}
	waitRoot, waitX, waitY := waitAsync(ctx, rec.w, root), waitAsync(ctx, rec.w, x), waitAsync(ctx, rec.w, y)
	notYet(t, waitRoot, "the root")
	atRoot.open()
	returned(t, waitRoot, "the root")

	// Held at b/x: b, found and watched before it, can be read; b/x and
	// what lies under it cannot.
	<-atX.reached
	returned(t, waitAsync(ctx, rec.w, b), "b")
	notYet(t, waitX, "b/x")
	notYet(t, waitY, "b/x/y")
	// b's watch is in place: the kernel queues this event, which the
	// watcher reads once its set-up is over. A Sync made now is a barrier
	// behind it.
	write(t, filepath.Join(b, "new"), "x")
	synced := make(chan error, 1)
	go func() { synced <- rec.w.Sync(ctx) }()
	notYet(t, synced, "Sync during the set-up")
	atX.open()
	returned(t, synced, "Sync during the set-up")
	// Sync returned: the write's event was read; it waits out Quiet, or
	// went out already.
	if st := rec.w.Status().Roots[0]; st.Pending == 0 && !has(rec.events(), Changed, filepath.Join(b, "new")) {
		t.Errorf("after Sync the write in b is neither pending nor sent: %+v", st)
	}
	returned(t, waitX, "b/x")
	returned(t, waitY, "b/x/y")
	write(t, filepath.Join(y, "new"), "x")
	rec.wait("Changed of the files made in b and b/x/y once they were waited for", func(evs []Event) bool {
		return has(evs, Changed, filepath.Join(b, "new")) && has(evs, Changed, filepath.Join(y, "new"))
	})

	waitFor(t, "CatchingUp false once the set-up is over and its events read", func() bool { return !rec.w.CatchingUp() })

	// Once the set-up is over nothing waits, not even a path outside the root.
	for _, d := range []string{rec.path("a"), rec.path("c"), rec.path("made-later"), "/"} {
		returned(t, waitAsync(ctx, rec.w, d), d)
	}
}

// TestWaitWatchedEndsWithContext: a wait for a directory the set-up has not
// tried ends with its context.
func TestWaitWatchedEndsWithContext(t *testing.T) {
	root := t.TempDir()
	mkdirs(t, root, "a")
	held := newGate(root)
	defer held.open()
	opts := Options{EarlyInitialRescan: true}
	opts.beforeWatch = held.hold
	rec := startAt(t, root, opts)
	<-held.reached
	ctx, cancel := context.WithCancel(context.Background())
	ch := waitAsync(ctx, rec.w, rec.path("a"))
	notYet(t, ch, "a")
	cancel()
	select {
	case err := <-ch:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitWatched after cancel: %v", err)
		}
	case <-time.After(waitLong):
		t.Fatal("WaitWatched did not end with its context")
	}
}

// TestWaitWatchedPastTheLimit: a directory the set-up could not watch
// (the watch limit) does not hold its reader while the set-up goes on;
// Status says it has no watch.
func TestWaitWatchedPastTheLimit(t *testing.T) {
	root := t.TempDir()
	mkdirs(t, root, "p/q", "p/r")
	p := filepath.Join(root, "p")
	// The limit lets the root and p have a watch; q and r get none. The
	// set-up is held at whichever of them it tries second.
	var mu sync.Mutex
	var tried []string
	second := make(chan string, 1)
	release := make(chan struct{})
	defer close(release)
	opts := Options{EarlyInitialRescan: true}
	opts.beforeWatch = func(d string) {
		if filepath.Dir(d) != p {
			return
		}
		mu.Lock()
		tried = append(tried, d)
		n := len(tried)
		mu.Unlock()
		if n == 2 {
			second <- d
			<-release
		}
	}
	rec := startAt(t, root, opts, func(w *Watcher) { w.roots[0].watchLimit.Store(2) })
	held := <-second
	mu.Lock()
	first := tried[0]
	mu.Unlock()
	returned(t, waitAsync(context.Background(), rec.w, first), "the directory past the limit")
	notYet(t, waitAsync(context.Background(), rec.w, held), "the directory the set-up is held at")
	release <- struct{}{}
	waitFor(t, "the status after the set-up", func() bool {
		st := rec.w.Status().Roots[0]
		return st.Watches == 2 && st.Degraded && st.Unwatched == 2
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not yet after %v: %s", waitLong, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slowWrites is a WriteRecorder that takes its time over each write,
// written or doubted.
type slowWrites struct {
	mu      sync.Mutex
	written map[string]bool
}

func (s *slowWrites) Written(path string, _, _ uint64) {
	time.Sleep(200 * time.Millisecond)
	s.mu.Lock()
	s.written[path] = true
	s.mu.Unlock()
}
func (s *slowWrites) Doubted(path string)            { s.Written(path, 0, 0) }
func (s *slowWrites) Arrived(string, uint64, uint64) {}
func (s *slowWrites) DirRenamed(string)              {}
func (s *slowWrites) DirMoved(string, string)        {}
func (s *slowWrites) Lost(string)                    {}

func (s *slowWrites) saw(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written[path]
}

// TestCatchingUpUntilWritesAreTold: CatchingUp stays true until Writes was
// told of a write made while the set-up ran, and ends once it was.
func TestCatchingUpUntilWritesAreTold(t *testing.T) {
	root := t.TempDir()
	mkdirs(t, root, "b/x")
	b := filepath.Join(root, "b")
	atX := newGate(filepath.Join(b, "x"))
	defer atX.open()
	writes := &slowWrites{written: make(map[string]bool)}
	opts := Options{EarlyInitialRescan: true, SyncDir: t.TempDir(), Writes: writes}
	opts.beforeWatch = atX.hold
	rec := startAt(t, root, opts)
	<-atX.reached
	returned(t, waitAsync(context.Background(), rec.w, b), "b")
	p := filepath.Join(b, "new")
	write(t, p, "x")
	atX.open()
	waitFor(t, "CatchingUp false", func() bool { return !rec.w.CatchingUp() })
	if !writes.saw(p) {
		t.Error("CatchingUp ended before Writes was told of the write made during the set-up")
	}
}

// TestCatchingUpWithoutSyncDir: without a sync directory nothing tells when
// the queued events are read, so CatchingUp stays true.
func TestCatchingUpWithoutSyncDir(t *testing.T) {
	rec := startAt(t, t.TempDir(), Options{EarlyInitialRescan: true})
	returned(t, waitAsync(context.Background(), rec.w, rec.root), "the root")
	time.Sleep(100 * time.Millisecond)
	if !rec.w.CatchingUp() {
		t.Error("CatchingUp ended without a sync directory to tell")
	}
}

// TestWaitWatchedSyncDirAndOutside: the sync directory inside a root never
// waits; a path outside every root waits for the whole set-up.
func TestWaitWatchedSyncDirAndOutside(t *testing.T) {
	root := t.TempDir()
	mkdirs(t, root, ".sync", "a")
	held := newGate(filepath.Join(root, "a"))
	defer held.open()
	opts := Options{EarlyInitialRescan: true, SyncDir: filepath.Join(root, ".sync")}
	opts.beforeWatch = held.hold
	rec := startAt(t, root, opts)
	<-held.reached
	returned(t, waitAsync(context.Background(), rec.w, filepath.Join(root, ".sync")), "the sync directory")
	outside := waitAsync(context.Background(), rec.w, t.TempDir())
	notYet(t, outside, "a path outside the root")
	held.open()
	returned(t, outside, "a path outside the root")
}
