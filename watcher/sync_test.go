package watcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncRig runs a Watcher over several roots with a SyncDir and collects its
// events.
type syncRig struct {
	w       *Watcher
	roots   []string
	syncDir string
	mu      sync.Mutex
	evs     []Event
	stop    func()
}

func startSync(t testing.TB, n int, opts Options, seams ...func(*Watcher)) *syncRig {
	t.Helper()
	rig := &syncRig{syncDir: t.TempDir()}
	for range n {
		rig.roots = append(rig.roots, t.TempDir())
	}
	if opts.SyncDir == "" {
		opts.SyncDir = rig.syncDir
	}
	opts.NoInitialRescan = true
	w, err := New(rig.roots, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seams {
		s(w)
	}
	rig.w = w
	rig.roots = w.Roots()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	go func() {
		for ev := range w.Events() {
			rig.mu.Lock()
			rig.evs = append(rig.evs, ev)
			rig.mu.Unlock()
		}
	}()
	var once sync.Once
	rig.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(rig.stop)
	// Run has started when a Sync waits for every root and every root's
	// first set-up is over: the sync directory is watched before the
	// root's tree, so a file written in between would be missed.
	deadline := time.Now().Add(waitLong)
	for !rig.watching() {
		if time.Now().After(deadline) {
			t.Fatal("roots never watched the sync directory")
		}
		time.Sleep(5 * time.Millisecond)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), waitLong)
	defer wcancel()
	for _, r := range rig.roots {
		if err := w.WaitWatched(wctx, r); err != nil {
			t.Fatalf("root %s never watched: %v", r, err)
		}
	}
	return rig
}

// watching reports whether every root reads cookie events.
func (g *syncRig) watching() bool {
	for _, r := range g.w.roots {
		r.sync.mu.Lock()
		on := r.sync.on
		r.sync.mu.Unlock()
		if !on {
			return false
		}
	}
	return true
}

func (g *syncRig) events() []Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Event(nil), g.evs...)
}

func (g *syncRig) pending(i int) int { return g.w.Status().Roots[i].Pending }

// syncNow calls Sync with a generous deadline and fails on any error.
func (g *syncRig) syncNow(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := g.w.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// checkClean fails when a cookie was emitted or left behind.
func (g *syncRig) checkClean(t *testing.T) {
	t.Helper()
	for _, ev := range g.events() {
		if strings.Contains(ev.Path, cookiePrefix) || strings.HasPrefix(ev.Path, g.w.opts.SyncDir) {
			t.Errorf("cookie emitted: %v", ev)
		}
	}
	names, err := os.ReadDir(g.w.opts.SyncDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		t.Errorf("left in the sync directory: %s", n.Name())
	}
}

func writeFiles(t testing.TB, dir, prefix string, n int) {
	t.Helper()
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("%s%d", prefix, i))
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSyncSeesEveryChange: right after Sync, every file written before it
// is pending (Quiet is long, so nothing settles meanwhile): one path per
// file, and one for a new tree whose files its Rescan covers.
func TestSyncSeesEveryChange(t *testing.T) {
	g := startSync(t, 2, Options{Quiet: time.Minute})
	for round := 1; round <= 3; round++ {
		prefix := fmt.Sprintf("r%d-", round)
		writeFiles(t, g.roots[0], prefix, 200)
		writeFiles(t, g.roots[1], prefix, 100)
		deep := filepath.Join(g.roots[0], prefix+"tree", "b", "c")
		if err := os.MkdirAll(deep, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFiles(t, deep, "f", 20)
		g.syncNow(t)
		if got, want := g.pending(0), round*201; got != want {
			t.Errorf("round %d: root 0: %d paths pending right after Sync, want %d", round, got, want)
		}
		if got, want := g.pending(1), round*100; got != want {
			t.Errorf("round %d: root 1: %d paths pending right after Sync, want %d", round, got, want)
		}
	}
	if evs := g.events(); len(evs) != 0 {
		t.Errorf("events before anything settled: %v", evs)
	}
	if st := g.w.Status().Roots[0]; st.Watches != 1+3*3 {
		t.Errorf("root 0 has %d watches, want 10 (the sync directory is not one)", st.Watches)
	}
	g.checkClean(t)
}

// TestSyncCookiesNeverEmitted: with a short Quiet, many Syncs, changes
// between them, and everything settled: only the files are emitted.
func TestSyncCookiesNeverEmitted(t *testing.T) {
	g := startSync(t, 1, Options{Quiet: 50 * time.Millisecond})
	for i := range 30 {
		writeFiles(t, g.roots[0], fmt.Sprintf("s%d-", i), 1)
		g.syncNow(t)
	}
	deadline := time.Now().Add(waitLong)
	for len(g.events()) < 30 || g.pending(0) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("files never settled: %v", g.events())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a cookie would have settled by now
	// A writer stalled for longer than Quiet between creating and writing
	// a file makes two events for it, so what counts is which paths came.
	paths := map[string]bool{}
	for _, ev := range g.events() {
		if ev.Kind != Changed || filepath.Dir(ev.Path) != g.roots[0] {
			t.Errorf("unexpected event %v", ev)
		}
		paths[ev.Path] = true
	}
	for i := range 30 {
		if p := filepath.Join(g.roots[0], fmt.Sprintf("s%d-0", i)); !paths[p] {
			t.Errorf("%s never emitted", p)
		}
	}
	if len(paths) != 30 {
		t.Errorf("%d paths emitted, want 30: %v", len(paths), g.events())
	}
	g.checkClean(t)
}

func TestSyncConcurrent(t *testing.T) {
	g := startSync(t, 3, Options{Quiet: time.Minute})
	const workers, rounds = 6, 20
	var wg sync.WaitGroup
	for k := range workers {
		wg.Go(func() {
			for i := range rounds {
				writeFiles(t, g.roots[k%3], fmt.Sprintf("w%d-%d-", k, i), 1)
				g.syncNow(t)
			}
		})
	}
	wg.Wait()
	for i := range g.roots {
		if got, want := g.pending(i), workers/3*rounds; got != want {
			t.Errorf("root %d: %d pending, want %d", i, got, want)
		}
	}
	g.checkClean(t)
}

// TestSyncRootRemoved: a root that is gone still reads its inotify
// instance and acknowledges cookies; the other roots are unaffected.
func TestSyncRootRemoved(t *testing.T) {
	g := startSync(t, 2, Options{Quiet: time.Minute, DegradedRescan: time.Hour})
	if err := os.RemoveAll(g.roots[1]); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, g.roots[0], "f", 10)
	g.syncNow(t)
	if got := g.pending(0); got != 10 {
		t.Errorf("root 0: %d pending, want 10", got)
	}
	if got := g.pending(1); got != 1 {
		t.Errorf("removed root: %d pending, want 1 (the root itself)", got)
	}
	g.syncNow(t)
	g.checkClean(t)
}

// TestSyncLostCookieOverflow: a cookie lost with an overflow does not hang
// Sync; the overflow Rescan is then pending.
func TestSyncLostCookieOverflow(t *testing.T) {
	g := startSync(t, 2, Options{Quiet: time.Minute}, func(w *Watcher) { w.roots[1].dropCookies.Store(true) })
	done := make(chan error, 1)
	go func() { done <- g.w.Sync(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("Sync returned (%v) though root 1 never saw its cookie", err)
	case <-time.After(200 * time.Millisecond):
	}
	g.w.injectOverflow(g.roots[1])
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLong):
		t.Fatal("Sync still waits after the overflow")
	}
	if got := g.pending(1); got != 1 {
		t.Errorf("root 1: %d pending after the overflow, want 1 (its Rescan)", got)
	}
	g.checkClean(t)
}

// TestSyncRealOverflow overflows the kernel queue for real (as
// TestRealQueueOverflow does) with a Sync made while it is full: its cookie
// is lost, and the overflow ends the wait.
func TestSyncRealOverflow(t *testing.T) {
	limit := procInt("max_queued_events")
	if limit == 0 || limit > 1<<16 {
		t.Skipf("fs.inotify.max_queued_events is %d: too many events to make in a unit test", limit)
	}
	syncDir := t.TempDir()
	root := t.TempDir()
	w := stalled(t, root, Options{SyncDir: syncDir})
	for i := range limit/2 + 4096 {
		p := filepath.Join(root, fmt.Sprintf("b%d", i))
		write(t, p, "")
		os.Truncate(p, 1)
	}
	synced := make(chan error, 1)
	go func() { synced <- w.Sync(context.Background()) }()
	overflowed := false
	for {
		select {
		case ev := <-w.Events():
			if ev.Kind == Rescan && ev.Reason == ReasonOverflow {
				overflowed = true
			}
			if strings.HasPrefix(ev.Path, syncDir) {
				t.Errorf("cookie emitted: %v", ev)
			}
			continue
		case err := <-synced:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(waitLong):
			t.Fatal("Sync hangs after an overflow")
		}
		break
	}
	if st := w.Status().Roots[0]; st.Overflows < 1 {
		t.Errorf("no overflow: %+v", st)
	} else if !overflowed && st.Pending == 0 {
		t.Errorf("Sync returned after an overflow with neither its Rescan sent nor pending: %+v", st)
	}
}

func TestSyncContext(t *testing.T) {
	g := startSync(t, 1, Options{})
	// The watcher's own Sync at start (CatchingUp) must see its cookie.
	waitFor(t, "the watcher's catch-up after its set-up", func() bool { return !g.w.CatchingUp() })
	g.w.roots[0].dropCookies.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.w.Sync(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Sync with a cancelled context: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := g.w.Sync(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Sync whose cookie never comes: %v, want the context's deadline", err)
	}
	g.w.roots[0].sync.mu.Lock()
	left := len(g.w.roots[0].sync.waiting)
	g.w.roots[0].sync.mu.Unlock()
	if left != 0 {
		t.Errorf("%d cookies still expected after Sync gave up", left)
	}
	g.checkClean(t)
}

func TestSyncAfterRunAndWithoutDir(t *testing.T) {
	g := startSync(t, 1, Options{})
	g.stop()
	if err := g.w.Sync(context.Background()); err != nil {
		t.Errorf("Sync after Run returned: %v", err)
	}
	w, err := New([]string{t.TempDir()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(context.Background()); err != nil {
		t.Errorf("Sync without SyncDir: %v", err)
	}
}

// TestSyncDirInsideRoot: a sync directory inside a root gets no watch of
// the root's own, and neither it nor its cookies are emitted.
func TestSyncDirInsideRoot(t *testing.T) {
	root := t.TempDir()
	syncDir := filepath.Join(root, "state", "sync")
	if err := os.MkdirAll(syncDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := New([]string{root}, Options{SyncDir: root}); !errors.Is(err, ErrSync) {
		t.Errorf("SyncDir equal to a root: %v", err)
	}
	r := startAt(t, root, Options{SyncDir: syncDir})
	if st := r.w.Status().Roots[0]; st.Watches != 2 {
		t.Errorf("watches = %d, want 2 (the root and state)", st.Watches)
	}
	f := r.path("f")
	write(t, f, "x")
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	for range 5 {
		if err := r.w.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	evs := r.wait("file", func(evs []Event) bool { return has(evs, Changed, f) })
	evs = append(evs, r.quiet(300*time.Millisecond)...)
	for _, ev := range evs {
		if strings.HasPrefix(ev.Path, syncDir) {
			t.Errorf("sync directory emitted: %v", ev)
		}
	}
}

// BenchmarkSync measures one Sync on an idle watcher.
func BenchmarkSync(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("roots=%d", n), func(b *testing.B) {
			g := startSync(b, n, Options{})
			for b.Loop() {
				g.syncNow(b)
			}
		})
	}
}
