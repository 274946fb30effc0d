package watcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/ignore"
	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/internal/testutil"
)

// Generous: these wait for events, they do not measure time.
const waitLong = 20 * time.Second

type recorder struct {
	t     *testing.T
	w     *Watcher
	root  string
	mu    sync.Mutex
	evs   []Event
	total uint64 // events received, reset or not
	got   chan struct{}
}

func start(t *testing.T, opts Options) *recorder {
	t.Helper()
	root := t.TempDir()
	return startAt(t, root, opts)
}

func startAt(t *testing.T, root string, opts Options, seams ...func(*Watcher)) *recorder {
	t.Helper()
	if opts.Quiet == 0 {
		opts.Quiet = 150 * time.Millisecond
	}
	w, err := New([]string{root}, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seams {
		s(w)
	}
	rec := &recorder{t: t, w: w, root: w.roots[0].path, got: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	go rec.read()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	if !opts.NoInitialRescan {
		rec.wait("initial rescan", func(evs []Event) bool {
			return has(evs, Rescan, rec.root)
		})
		rec.reset()
	}
	return rec
}

// read records the watcher's events until Events is closed.
func (r *recorder) read() {
	for ev := range r.w.Events() {
		r.mu.Lock()
		r.evs = append(r.evs, ev)
		r.total++
		r.mu.Unlock()
		select {
		case r.got <- struct{}{}:
		default:
		}
	}
}

func (r *recorder) path(rel string) string { return filepath.Join(r.root, rel) }

func (r *recorder) reset() {
	r.mu.Lock()
	r.evs = nil
	r.mu.Unlock()
}

func (r *recorder) events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.evs...)
}

// wait blocks until cond holds for the events so far.
func (r *recorder) wait(what string, cond func([]Event) bool) []Event {
	r.t.Helper()
	deadline := time.After(waitLong)
	for {
		evs := r.events()
		if cond(evs) {
			return evs
		}
		select {
		case <-r.got:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			r.t.Fatalf("timed out waiting for %s; events: %v", what, evs)
		}
	}
}

// quiet waits a while and returns the events that arrived; for checks that
// something did not happen.
func (r *recorder) quiet(d time.Duration) []Event {
	time.Sleep(d)
	return r.events()
}

func has(evs []Event, k Kind, p string) bool {
	return count(evs, k, p) > 0
}

// moved reports a Moved of the directory from to the path to.
func moved(evs []Event, from, to string) bool {
	for _, e := range evs {
		if e.Kind == Moved && e.From == from && e.Path == to {
			return true
		}
	}
	return false
}

// movedVia reports whether the Moved events among evs, taken in order,
// carry from to to: one Moved, or a chain of them.
func movedVia(evs []Event, from, to string) bool {
	at := from
	for _, e := range evs {
		if e.Kind == Moved && e.From == at {
			at = e.Path
			if at == to {
				return true
			}
		}
	}
	return false
}

func count(evs []Event, k Kind, p string) int {
	n := 0
	for _, e := range evs {
		if e.Kind == k && e.Path == p {
			n++
		}
	}
	return n
}

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestNewRejectsBadRoots(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	write(t, file, "x")
	for _, roots := range [][]string{
		nil,
		{filepath.Join(dir, "missing")},
		{file},
		{dir, filepath.Join(dir)},
		{dir, dir + "/sub/.."},
	} {
		if _, err := New(roots, Options{}); err == nil {
			t.Errorf("New(%q) succeeded", roots)
		}
	}
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	if _, err := New([]string{dir, sub}, Options{}); err == nil {
		t.Error("nested roots accepted")
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(sub, link); err != nil {
		t.Fatal(err)
	}
	if _, err := New([]string{dir, link}, Options{}); !errors.Is(err, ErrRoot) || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("a root nested through a symlink: %v, want an overlap", err)
	}
}

func TestFileLifecycle(t *testing.T) {
	r := start(t, Options{})
	f := r.path("a.txt")

	write(t, f, "one")
	r.wait("create", func(evs []Event) bool { return has(evs, Changed, f) })
	r.reset()

	fh, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteString("two")
	fh.Close()
	r.wait("append", func(evs []Event) bool { return has(evs, Changed, f) })
	r.reset()

	if err := os.Truncate(f, 1); err != nil {
		t.Fatal(err)
	}
	r.wait("truncate", func(evs []Event) bool { return has(evs, Changed, f) })
	r.reset()

	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(f, future, future); err != nil {
		t.Fatal(err)
	}
	r.wait("touch", func(evs []Event) bool { return has(evs, Changed, f) })
	r.reset()

	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	evs := r.wait("delete", func(evs []Event) bool { return has(evs, Removed, f) })
	if has(evs, Changed, f) {
		t.Errorf("deleted file reported changed: %v", evs)
	}
}

func TestRenameAndMoveFiles(t *testing.T) {
	r := start(t, Options{})
	os.Mkdir(r.path("d1"), 0o755)
	os.Mkdir(r.path("d2"), 0o755)
	write(t, r.path("d1/a"), "a")
	// d1/a is covered by the Rescan of d1, which is new.
	r.wait("setup", func(evs []Event) bool { return has(evs, Rescan, r.path("d1")) && has(evs, Rescan, r.path("d2")) })
	r.reset()

	if err := os.Rename(r.path("d1/a"), r.path("d1/b")); err != nil {
		t.Fatal(err)
	}
	r.wait("rename", func(evs []Event) bool {
		return has(evs, Removed, r.path("d1/a")) && has(evs, Changed, r.path("d1/b"))
	})
	r.reset()

	if err := os.Rename(r.path("d1/b"), r.path("d2/c")); err != nil {
		t.Fatal(err)
	}
	r.wait("move across directories", func(evs []Event) bool {
		return has(evs, Removed, r.path("d1/b")) && has(evs, Changed, r.path("d2/c"))
	})
	r.reset()

	// Atomic save: write a temporary file, rename it over the target.
	write(t, r.path("d2/.c.swp"), "new")
	if err := os.Rename(r.path("d2/.c.swp"), r.path("d2/c")); err != nil {
		t.Fatal(err)
	}
	evs := r.wait("atomic replace", func(evs []Event) bool { return has(evs, Changed, r.path("d2/c")) })
	if has(evs, Changed, r.path("d2/.c.swp")) {
		// It may settle before the rename only if the rename came a whole
		// quiet period later; here it did not.
		t.Logf("temporary file reported: %v", evs)
	}
}

func TestMkdirPThenFiles(t *testing.T) {
	r := start(t, Options{})
	deep := r.path("a/b/c")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, d := range []string{"a", "a/b", "a/b/c"} {
		for i := range 3 {
			p := r.path(fmt.Sprintf("%s/f%d", d, i))
			write(t, p, p)
			files = append(files, p)
		}
	}
	// Every file must be reported, or covered by a Rescan of a directory
	// above it (emitted after that directory's watch was in place).
	covered := func(evs []Event, f string) bool {
		for _, e := range evs {
			if (e.Kind == Changed && e.Path == f) || (e.Kind == Rescan && roots.Within(f, e.Path)) {
				return true
			}
		}
		return false
	}
	r.wait("every file covered", func(evs []Event) bool {
		for _, f := range files {
			if !covered(evs, f) {
				return false
			}
		}
		return true
	})
	if st := r.w.Status().Roots[0]; st.Watches != 4 {
		t.Errorf("watches = %d, want 4 (root, a, a/b, a/b/c)", st.Watches)
	}
	// The deepest directory is watched: a new file there is reported.
	r.reset()
	late := filepath.Join(deep, "late")
	write(t, late, "x")
	r.wait("file in new deep dir", func(evs []Event) bool { return has(evs, Changed, late) })
}

func TestDeleteTree(t *testing.T) {
	r := start(t, Options{})
	os.MkdirAll(r.path("t/x/y"), 0o755)
	write(t, r.path("t/x/y/f"), "f")
	r.wait("setup", func(evs []Event) bool { return len(evs) > 0 })
	r.quiet(300 * time.Millisecond)
	if st := r.w.Status().Roots[0]; st.Watches != 4 {
		t.Fatalf("watches = %d, want 4", st.Watches)
	}
	r.reset()
	if err := os.RemoveAll(r.path("t")); err != nil {
		t.Fatal(err)
	}
	r.wait("tree removed", func(evs []Event) bool { return has(evs, Removed, r.path("t")) })
	r.wait("watches dropped", func([]Event) bool { return r.w.Status().Roots[0].Watches == 1 })
}

func TestRemoveAllIsOneEvent(t *testing.T) {
	r := start(t, Options{Quiet: time.Second})
	tr := r.path("t")
	os.MkdirAll(filepath.Join(tr, "sub"), 0o755)
	for i := range 200 {
		write(t, filepath.Join(tr, "sub", fmt.Sprint(i)), "x")
	}
	r.wait("setup", func(evs []Event) bool { return has(evs, Rescan, tr) })
	r.reset()
	if err := os.RemoveAll(tr); err != nil {
		t.Fatal(err)
	}
	r.wait("tree removed", func(evs []Event) bool { return has(evs, Removed, tr) })
	evs := r.quiet(500 * time.Millisecond)
	if len(evs) != 1 {
		t.Errorf("rm -rf of 200 files made %d events, want one Removed: %v", len(evs), evs[:min(len(evs), 5)])
	}
}

func TestDirectoryReplacedByFile(t *testing.T) {
	r := start(t, Options{})
	d := r.path("d")
	os.Mkdir(d, 0o755)
	write(t, filepath.Join(d, "f"), "x")
	r.wait("setup", func(evs []Event) bool { return has(evs, Rescan, d) })
	r.reset()
	os.RemoveAll(d)
	write(t, d, "now a file")
	evs := r.wait("file", func(evs []Event) bool { return has(evs, Changed, d) })
	// Records under d/ must go: a Removed for d comes before the Changed.
	if !has(evs, Removed, d) {
		t.Errorf("no Removed for the directory's subtree: %v", evs)
	}
}

func TestRenameDirectory(t *testing.T) {
	r := start(t, Options{})
	os.MkdirAll(r.path("old/sub"), 0o755)
	write(t, r.path("old/sub/f"), "f")
	r.wait("setup", func(evs []Event) bool { return len(evs) > 0 })
	r.quiet(300 * time.Millisecond)
	r.reset()

	if err := os.Rename(r.path("old"), r.path("new")); err != nil {
		t.Fatal(err)
	}
	r.wait("rename dir", func(evs []Event) bool { return moved(evs, r.path("old"), r.path("new")) })
	r.reset()
	// Watches follow the new names: an event deep inside carries the new path.
	write(t, r.path("new/sub/g"), "g")
	evs := r.wait("event under renamed dir", func(evs []Event) bool { return has(evs, Changed, r.path("new/sub/g")) })
	for _, e := range evs {
		if strings.Contains(e.Path, "/old/") {
			t.Errorf("stale path after rename: %v", e)
		}
	}
	if st := r.w.Status().Roots[0]; st.Watches != 3 {
		t.Errorf("watches = %d, want 3", st.Watches)
	}
}

func TestMoveInAndOut(t *testing.T) {
	outside := t.TempDir()
	r := start(t, Options{})
	os.MkdirAll(filepath.Join(outside, "in/deep"), 0o755)
	write(t, filepath.Join(outside, "in/deep/f"), "f")

	if err := os.Rename(filepath.Join(outside, "in"), r.path("in")); err != nil {
		t.Fatal(err)
	}
	r.wait("move in", func(evs []Event) bool { return has(evs, Rescan, r.path("in")) })
	r.reset()
	write(t, r.path("in/deep/g"), "g")
	r.wait("moved-in subtree watched", func(evs []Event) bool { return has(evs, Changed, r.path("in/deep/g")) })
	r.reset()

	if err := os.Rename(r.path("in"), filepath.Join(outside, "out")); err != nil {
		t.Fatal(err)
	}
	r.wait("move out", func(evs []Event) bool { return has(evs, Removed, r.path("in")) })
	r.wait("watches dropped", func([]Event) bool { return r.w.Status().Roots[0].Watches == 1 })
	// Changes in the moved-out tree are not reported under any path.
	r.reset()
	write(t, filepath.Join(outside, "out/deep/h"), "h")
	if evs := r.quiet(500 * time.Millisecond); len(evs) > 0 {
		t.Errorf("events from a tree moved out of the root: %v", evs)
	}
}

// waitWatching waits until w's first root has its watch in place.
func waitWatching(t *testing.T, w *Watcher) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for st := w.Status(); len(st.Roots) == 0 || st.Roots[0].Watches < 1; st = w.Status() {
		if time.Now().After(deadline) {
			t.Fatal("the root's watch was never in place")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBurst(t *testing.T) {
	const n = 10000
	// The default quiet period: a writer stalled longer than it between
	// creating and writing a file legitimately makes two events.
	r := start(t, Options{Quiet: time.Second})
	dir := r.path("burst")
	os.Mkdir(dir, 0o755)
	r.wait("dir", func(evs []Event) bool { return has(evs, Rescan, dir) })
	r.reset()
	for i := range n {
		write(t, filepath.Join(dir, fmt.Sprintf("f%05d", i)), "x")
	}
	evs := r.wait("every file", func(evs []Event) bool {
		seen := 0
		for _, e := range evs {
			if e.Kind == Rescan && e.Reason == ReasonOverflow {
				return true
			}
			if e.Kind == Changed {
				seen++
			}
		}
		return seen >= n
	})
	seen := map[string]int{}
	for _, e := range evs {
		if e.Kind == Rescan && e.Reason == ReasonOverflow {
			t.Logf("queue overflowed; the root rescan covers the burst")
		}
		if e.Kind == Changed {
			seen[e.Path]++
		}
	}
	for p, c := range seen {
		if c > 1 {
			t.Errorf("%s emitted %d times", p, c)
		}
	}
	if len(seen) != n && r.w.Status().Roots[0].Overflows == 0 {
		t.Errorf("%d of %d files emitted, no overflow", len(seen), n)
	}
	// The count is published after the last event is sent: wait for it.
	r.wait("nothing pending after settling", func([]Event) bool { return r.w.Status().Roots[0].Pending == 0 })
}

func TestSlowWriterEmittedOnceAfterDone(t *testing.T) {
	r := start(t, Options{Quiet: time.Second})
	f := r.path("slow")
	fh, err := os.Create(f)
	if err != nil {
		t.Fatal(err)
	}
	for range 30 {
		fh.WriteString("chunk\n")
		time.Sleep(100 * time.Millisecond)
	}
	fh.Close()
	done := len(r.events())
	evs := r.wait("slow file", func(evs []Event) bool { return has(evs, Changed, f) })
	if done != 0 {
		t.Errorf("events while the writer was still writing: %v", evs[:done])
	}
	evs = r.quiet(1500 * time.Millisecond)
	if c := count(evs, Changed, f); c != 1 {
		t.Errorf("slow file emitted %d times: %v", c, evs)
	}
}

func TestOverflowRescansRootWithBackoff(t *testing.T) {
	r := start(t, Options{OverflowBackoff: 2 * time.Second})
	os.MkdirAll(r.path("a/b"), 0o755)
	r.wait("setup", func(evs []Event) bool { return len(evs) > 0 })
	r.reset()

	r.w.injectOverflow(r.root)
	r.wait("overflow rescan", func(evs []Event) bool { return has(evs, Rescan, r.root) })
	for range 5 {
		r.w.injectOverflow(r.root)
		time.Sleep(10 * time.Millisecond)
	}
	evs := r.wait("second overflow rescan", func(evs []Event) bool { return count(evs, Rescan, r.root) >= 2 })
	for _, e := range evs {
		if e.Kind == Rescan && e.Reason != ReasonOverflow {
			t.Errorf("unexpected reason: %v", e)
		}
	}
	if c := count(r.quiet(time.Second), Rescan, r.root); c != 2 {
		t.Errorf("a storm of overflows gave %d rescans, want 2", c)
	}
	st := r.w.Status().Roots[0]
	if st.Overflows != 6 || st.LastOverflow.IsZero() {
		t.Errorf("status %+v", st)
	}
	if st.Watches != 3 {
		t.Errorf("watches after overflow = %d, want 3", st.Watches)
	}
}

func TestWatchLimitDegradedMode(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/x", "a/y", "b", "c"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	// 6 directories; allow 3 watches.
	var logBuf testutil.Buffer
	logger := slog.New(slog.NewTextHandler(&logBuf, nil))
	r := startAt(t, root, Options{DegradedRescan: 300 * time.Millisecond, Logger: logger}, func(w *Watcher) { w.setWatchLimit(3) })
	st := r.w.Status().Roots[0]
	if !st.Degraded || st.Watches != 3 || st.Unwatched != 3 || st.WatchesNeeded != 6 {
		t.Fatalf("status %+v", st)
	}
	if !strings.HasPrefix(st.Sysctl, "sysctl fs.inotify.max_user_watches=") || st.MaxUserWatches == 0 {
		t.Errorf("sysctl advice %q, current %d", st.Sysctl, st.MaxUserWatches)
	}
	// Unwatched directories are rescanned periodically.
	evs := r.wait("degraded rescans", func(evs []Event) bool {
		n := 0
		for _, e := range evs {
			if e.Kind == Rescan && e.Reason == ReasonDegraded {
				n++
			}
		}
		return n >= 2
	})
	for _, e := range evs {
		// The root got the first watch; only directories below lack one.
		if e.Kind == Rescan && e.Reason == ReasonDegraded && (e.Path == root || !roots.Within(e.Path, root)) {
			t.Errorf("degraded rescan of a watched directory: %v", e)
		}
	}
	// Watched directories keep working.
	write(t, filepath.Join(root, "f"), "x")
	r.wait("watched part works", func(evs []Event) bool { return has(evs, Changed, filepath.Join(root, "f")) })
	// The log says what to do.
	if log := logBuf.String(); !strings.Contains(log, "watch limit reached") || !strings.Contains(log, st.Sysctl) || !strings.Contains(log, "needed=6") {
		t.Errorf("log does not give the fix:\n%s", log)
	}
	// Once the limit is raised, the next periodic retry watches everything.
	r.w.setWatchLimit(0)
	r.wait("all watched", func([]Event) bool {
		st := r.w.Status().Roots[0]
		return !st.Degraded && st.Watches == 6 && st.Sysctl == ""
	})
	r.reset()
	write(t, filepath.Join(root, "a/y/g"), "g")
	r.wait("formerly unwatched dir works", func(evs []Event) bool { return has(evs, Changed, filepath.Join(root, "a/y/g")) })
}

func TestIgnoredDirectoriesGetNoWatch(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, ".git/objects"), 0o755)
	m := ignore.MustNew(append(ignore.Defaults(), "*.tmp"))
	r := startAt(t, root, Options{Ignore: m})
	if st := r.w.Status().Roots[0]; st.Watches != 1 {
		t.Errorf("watches = %d, want 1 (.git ignored)", st.Watches)
	}
	write(t, filepath.Join(root, ".git/objects/x"), "x")
	write(t, filepath.Join(root, "scratch.tmp"), "x")
	os.Mkdir(filepath.Join(root, ".cache"), 0o755)
	write(t, filepath.Join(root, "kept"), "x")
	r.wait("kept", func(evs []Event) bool { return has(evs, Changed, filepath.Join(root, "kept")) })
	evs := r.quiet(300 * time.Millisecond)
	for _, e := range evs {
		if e.Path != filepath.Join(root, "kept") {
			t.Errorf("ignored path reported: %v", e)
		}
	}
	if st := r.w.Status().Roots[0]; st.Watches != 1 {
		t.Errorf("watches = %d, want 1", st.Watches)
	}
}

func TestSafetyRescan(t *testing.T) {
	r := start(t, Options{SafetyRescan: 200 * time.Millisecond})
	r.wait("safety rescan", func(evs []Event) bool {
		for _, e := range evs {
			if e.Kind == Rescan && e.Path == r.root && e.Reason == ReasonSafety {
				return true
			}
		}
		return false
	})
}

func TestRunClosesEvents(t *testing.T) {
	w, err := New([]string{t.TempDir()}, Options{NoInitialRescan: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok := <-w.Events(); ok {
		t.Error("Events not closed")
	}
	if err := w.Run(context.Background()); err != ErrStarted {
		t.Errorf("second Run: %v", err)
	}
}

func TestDirectoryRenamedOverAnother(t *testing.T) {
	r := start(t, Options{})
	os.MkdirAll(r.path("a/sub"), 0o755)
	os.Mkdir(r.path("b"), 0o755)
	r.wait("setup", func(evs []Event) bool { return has(evs, Rescan, r.path("a")) && has(evs, Rescan, r.path("b")) })
	r.reset()
	// rename(2) replaces the empty directory b with a.
	if err := unix.Rename(r.path("a"), r.path("b")); err != nil {
		t.Fatal(err)
	}
	r.wait("rename over", func(evs []Event) bool { return moved(evs, r.path("a"), r.path("b")) })
	r.reset()
	write(t, r.path("b/sub/f"), "f")
	write(t, r.path("b/g"), "g")
	r.wait("new b is watched", func(evs []Event) bool {
		return has(evs, Changed, r.path("b/sub/f")) && has(evs, Changed, r.path("b/g"))
	})
	if st := r.w.Status().Roots[0]; st.Watches != 3 {
		t.Errorf("watches = %d, want 3", st.Watches)
	}
}

func TestRewrittenWhileQueuedEmittedOnce(t *testing.T) {
	r := start(t, Options{Quiet: 500 * time.Millisecond})
	f := r.path("f")
	for i := range 5 {
		write(t, f, strings.Repeat("x", i))
	}
	os.Truncate(f, 0)
	write(t, f, "final")
	r.wait("rewritten file", func(evs []Event) bool { return has(evs, Changed, f) })
	if c := count(r.quiet(time.Second), Changed, f); c != 1 {
		t.Errorf("emitted %d times", c)
	}
}

func TestNeverQuietFileEmittedByMaxDelay(t *testing.T) {
	r := start(t, Options{Quiet: 400 * time.Millisecond, MaxDelay: time.Second})
	f := r.path("log")
	fh, err := os.Create(f)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	stop := time.Now().Add(waitLong)
	for time.Now().Before(stop) && !has(r.events(), Changed, f) {
		fh.WriteString("line\n")
		time.Sleep(50 * time.Millisecond)
	}
	if !has(r.events(), Changed, f) {
		t.Fatal("a file written continuously was never emitted")
	}
}

func TestRootRemovedAndRecreated(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	os.Mkdir(root, 0o755)
	r := startAt(t, root, Options{DegradedRescan: 200 * time.Millisecond})
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	r.wait("root removed", func(evs []Event) bool { return has(evs, Removed, root) })
	r.wait("status says missing", func([]Event) bool { return r.w.Status().Roots[0].RootMissing })
	if st := r.w.Status().Roots[0]; st.Degraded || st.Sysctl != "" {
		t.Errorf("a missing root is reported as a watch limit: %+v", st)
	}
	os.Mkdir(root, 0o755)
	r.wait("root back", func(evs []Event) bool { return has(evs, Rescan, root) })
	r.reset()
	write(t, filepath.Join(root, "f"), "f")
	r.wait("watching again", func(evs []Event) bool { return has(evs, Changed, filepath.Join(root, "f")) })
}

func TestSymlinkedRoot(t *testing.T) {
	real := t.TempDir()
	os.MkdirAll(filepath.Join(real, "sub/deep"), 0o755)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	r := startAt(t, link, Options{})
	if got := r.w.Roots(); len(got) != 1 || got[0] != link {
		t.Errorf("Roots() = %v", got)
	}
	if st := r.w.Status().Roots[0]; st.Watches != 3 {
		t.Errorf("watches = %d, want 3", st.Watches)
	}
	f := filepath.Join(link, "sub/deep/f")
	write(t, f, "x")
	r.wait("event under a symlinked root", func(evs []Event) bool { return has(evs, Changed, f) })
}

// TestRealQueueOverflow overflows the kernel's inotify queue for real: the
// consumer stops reading, so the watcher and fsnotify stall, and more
// events are made than fs.inotify.max_queued_events holds.
func TestRealQueueOverflow(t *testing.T) {
	limit := procInt("max_queued_events")
	if limit == 0 || limit > 1<<16 {
		t.Skipf("fs.inotify.max_queued_events is %d: too many events to make in a unit test", limit)
	}
	root := t.TempDir()
	w := stalled(t, root, Options{})
	// Two events per file (IN_CREATE, IN_MODIFY from the truncate): more
	// than the kernel queue plus fsnotify's read buffer (4096) hold.
	for i := range limit/2 + 4096 {
		p := filepath.Join(root, fmt.Sprintf("b%d", i))
		write(t, p, "")
		os.Truncate(p, 1)
	}
	for {
		select {
		case ev := <-w.Events():
			if ev.Kind == Rescan && ev.Path == root && ev.Reason == ReasonOverflow {
				if st := w.Status().Roots[0]; st.Overflows < 1 {
					t.Errorf("status: %+v", st)
				}
				return
			}
		case <-time.After(waitLong):
			t.Fatal("no overflow rescan")
		}
	}
}

// stalled runs a watcher on root whose events nobody reads until the test
// does: it fills its Events buffer with files written for the purpose, so
// the watcher blocks and reads no more inotify events.
func stalled(t *testing.T, root string, opts Options) *Watcher {
	t.Helper()
	opts.Quiet, opts.NoInitialRescan = 50*time.Millisecond, true
	w, err := New([]string{root}, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range w.Events() {
		}
		<-done
	})
	waitWatching(t, w)
	writeFiles(t, root, "a", cap(w.events)+50)
	for deadline := time.Now().Add(waitLong); len(w.events) < cap(w.events); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("watcher never blocked")
		}
	}
	return w
}

// TestDirMovedIntoNewDirStaysWatched: a directory moved into another one
// that was itself just renamed is met first by the walk that watches the
// renamed one, before the event for its own old name is read. Its watch
// must survive that event: the kernel keeps one watch per inode, so the
// old name's and the new name's are the same watch.
func TestDirMovedIntoNewDirStaysWatched(t *testing.T) {
	root := t.TempDir()
	mustOK(t, os.MkdirAll(filepath.Join(root, "p/sub"), 0o755))
	mustOK(t, os.MkdirAll(filepath.Join(root, "x/deep"), 0o755))
	w := stalled(t, root, Options{})
	// Both renames wait in the queue: when the watcher walks p2, x is
	// already in it as p2/sub/x2.
	mustOK(t, os.Rename(filepath.Join(root, "p"), filepath.Join(root, "p2")))
	mustOK(t, os.Rename(filepath.Join(root, "x"), filepath.Join(root, "p2/sub/x2")))
	drain := func(d time.Duration) []Event {
		var evs []Event
		for end := time.After(d); ; {
			select {
			case ev := <-w.Events():
				evs = append(evs, ev)
			case <-end:
				return evs
			}
		}
	}
	drain(time.Second)
	for _, p := range []string{"p2/sub/x2/new", "p2/sub/x2/deep/new"} {
		write(t, filepath.Join(root, p), "written after the moves")
	}
	evs := drain(time.Second)
	for _, p := range []string{"p2/sub/x2/new", "p2/sub/x2/deep/new"} {
		if !has(evs, Changed, filepath.Join(root, p)) {
			t.Errorf("no event for %s: its directory lost its watch; events: %v", p, evs)
		}
	}
	if st := w.Status().Roots[0]; st.Watches != 5 {
		t.Errorf("%d watches, want 5 (root, p2, sub, x2, deep)", st.Watches)
	}
}

// TestBindMountInsideRoot: a directory mounted a second time inside the
// root is one inode under two names, which inotify watches once. The
// watcher keeps the first name's watch and does not take the second for a
// move (which would drop and re-add the two names back and forth).
func TestBindMountInsideRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount")
	}
	root := t.TempDir()
	mustOK(t, os.MkdirAll(filepath.Join(root, "a/in"), 0o755))
	mustOK(t, os.Mkdir(filepath.Join(root, "b"), 0o755))
	if err := unix.Mount(filepath.Join(root, "a"), filepath.Join(root, "b"), "", unix.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind-mount here: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(filepath.Join(root, "b"), unix.MNT_DETACH) })
	r := startAt(t, root, Options{Quiet: 50 * time.Millisecond})
	write(t, filepath.Join(root, "a/in/f"), "x")
	// The name that keeps the watch is the one read first, in the file
	// system's hash order, which its seed makes differ between machines.
	r.wait("the change", func(evs []Event) bool {
		return has(evs, Changed, r.path("a/in/f")) || has(evs, Changed, r.path("b/in/f"))
	})
	r.reset()
	if evs := r.quiet(time.Second); len(evs) > 0 {
		t.Errorf("events with nothing changing: %v", evs)
	}
	if st := r.w.Status().Roots[0]; st.Watches != 3 {
		t.Errorf("%d watches, want 3 (root, a, a/in; b and b/in are the same inodes)", st.Watches)
	}
}
