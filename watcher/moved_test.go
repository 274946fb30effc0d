package watcher

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/roots"
)

// settled waits until a Sync has passed, nothing is pending and every event
// sent was recorded, then returns the events since the last reset: all the
// watcher will say about the changes made before.
func (r *recorder) settled(what string) []Event {
	r.t.Helper()
	mustOK(r.t, r.w.Sync(context.Background()))
	r.wait(what, func([]Event) bool {
		pending := 0
		for _, s := range r.w.Status().Roots {
			pending += s.Pending
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return pending == 0 && r.total == r.w.Emitted()
	})
	return r.events() // the events wait saw may predate the condition
}

// A directory renamed within the root is one Moved; the new name's
// watches are in place when it arrives, and nothing else is said.
func TestMovedWithinRoot(t *testing.T) {
	r := start(t, Options{SyncDir: t.TempDir()})
	mustOK(t, os.MkdirAll(r.path("a/sub"), 0o755))
	write(t, r.path("a/sub/f"), "f")
	r.settled("setup")
	r.reset()

	mustOK(t, os.Rename(r.path("a"), r.path("b")))
	r.wait("the move", func(evs []Event) bool { return moved(evs, r.path("a"), r.path("b")) })
	write(t, r.path("b/sub/g"), "written after the move")
	r.wait("a change under the new name", func(evs []Event) bool { return has(evs, Changed, r.path("b/sub/g")) })
	evs := r.settled("the old name settled")
	if len(evs) != 2 || evs[0].Kind != Moved {
		t.Errorf("events %v, want the Moved and then the Changed", evs)
	}
	if st := r.w.Status().Roots[0]; st.Watches != 3 {
		t.Errorf("watches = %d, want 3 (root, b, b/sub)", st.Watches)
	}
}

// A directory moved into another directory of the root.
func TestMovedIntoSubdirectory(t *testing.T) {
	r := start(t, Options{SyncDir: t.TempDir()})
	mustOK(t, os.MkdirAll(r.path("a/sub"), 0o755))
	mustOK(t, os.MkdirAll(r.path("p/q"), 0o755))
	r.settled("setup")
	r.reset()

	mustOK(t, os.Rename(r.path("a"), r.path("p/q/a2")))
	r.wait("the move", func(evs []Event) bool { return moved(evs, r.path("a"), r.path("p/q/a2")) })
	write(t, r.path("p/q/a2/sub/f"), "written after the move")
	r.wait("a change under the new name", func(evs []Event) bool { return has(evs, Changed, r.path("p/q/a2/sub/f")) })
	for _, e := range r.settled("the old name settled") {
		if e.Kind == Removed || e.Kind == Rescan {
			t.Errorf("%v besides the Moved", e)
		}
	}
}

// The trigger of files lost under renamed directories: two renames in a
// row and a file written at once. Read together, the renames are one
// Moved from the first name to the last, whose walk finds the file; a
// later change to the file is a Changed.
func TestMovedChain(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"p1/dI/sub", "p2", "p3"} {
		mustOK(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	w := stalled(t, root, Options{SyncDir: t.TempDir()})
	mustOK(t, os.Rename(filepath.Join(root, "p1/dI"), filepath.Join(root, "p2/rI")))
	mustOK(t, os.Rename(filepath.Join(root, "p2/rI"), filepath.Join(root, "p3/sI")))
	write(t, filepath.Join(root, "p3/sI/x.txt"), "written after the renames")
	r := follow(t, w, root)
	from, to := filepath.Join(root, "p1/dI"), filepath.Join(root, "p3/sI")
	// The watcher reads inotify while it waits to send, so on a loaded
	// machine it may read the two renames apart: two Moved in a row, which
	// a consumer applies in order, say the same as one.
	r.wait("the move", func(evs []Event) bool { return movedVia(evs, from, to) })
	write(t, filepath.Join(root, "p3/sI/sub/y.txt"), "written later")
	r.wait("a change under the last name", func(evs []Event) bool { return has(evs, Changed, filepath.Join(root, "p3/sI/sub/y.txt")) })
	seen := false
	for _, e := range r.settled("the old names settled") {
		switch {
		case e.Kind == Moved:
			seen = true
		case seen && roots.Within(to, e.Path) && e.Kind == Removed:
			t.Errorf("%v after the Moved: the consumer would drop x.txt", e)
		case e.Kind == Rescan && roots.Within(e.Path, filepath.Join(root, "p3")):
			t.Errorf("%v besides the Moved", e)
		}
	}
}

// follow reads a stalled watcher's events into a recorder.
func follow(t *testing.T, w *Watcher, root string) *recorder {
	rec := &recorder{t: t, w: w, root: root, got: make(chan struct{}, 1)}
	go rec.read()
	return rec
}

// The same chain as it comes, without holding the watcher back: whatever
// the watcher pairs, x.txt must reach the consumer through a walk or a
// Changed issued once the last name was watched.
func TestMovedChainLive(t *testing.T) {
	r := start(t, Options{SyncDir: t.TempDir()})
	for _, d := range []string{"p1/dI", "p2", "p3"} {
		mustOK(t, os.MkdirAll(r.path(d), 0o755))
	}
	r.settled("setup")
	r.reset()
	mustOK(t, os.Rename(r.path("p1/dI"), r.path("p2/rI")))
	mustOK(t, os.Rename(r.path("p2/rI"), r.path("p3/sI")))
	write(t, r.path("p3/sI/x.txt"), "x")
	x := r.path("p3/sI/x.txt")
	covered := false
	for _, e := range r.settled("the renames settled") {
		switch {
		case e.Kind == Changed && e.Path == x, (e.Kind == Moved || e.Kind == Rescan) && roots.Within(x, e.Path):
			covered = true
		case e.Kind == Removed && roots.Within(x, e.Path):
			covered = false
		}
	}
	if !covered {
		t.Errorf("no event brings x.txt to the consumer: %v", r.events())
	}
}

// A directory moved from one root to another is not paired: Removed in
// the first, Rescan in the second.
func TestMovedAcrossRoots(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	mustOK(t, os.MkdirAll(filepath.Join(a, "d/sub"), 0o755))
	mustOK(t, os.Mkdir(b, 0o755))
	w, err := New([]string{a, b}, Options{Quiet: 150 * time.Millisecond, SyncDir: t.TempDir(), NoInitialRescan: true})
	mustOK(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r := follow(t, w, a)
	r.wait("both roots watched", func([]Event) bool {
		st := w.Status()
		return st.Roots[0].Watches == 3 && st.Roots[1].Watches == 1
	})
	mustOK(t, os.Rename(filepath.Join(a, "d"), filepath.Join(b, "d")))
	evs := r.settled("the move settled")
	if !has(evs, Removed, filepath.Join(a, "d")) || !has(evs, Rescan, filepath.Join(b, "d")) {
		t.Errorf("events %v, want Removed in the first root and Rescan in the second", evs)
	}
	for _, e := range evs {
		if e.Kind == Moved {
			t.Errorf("a move across roots was paired: %v", e)
		}
	}
}

// The old name made again after a move: the Moved comes first, then the
// new directory at the old name is a Rescan.
func TestMovedThenOldNameMadeAgain(t *testing.T) {
	r := start(t, Options{SyncDir: t.TempDir()})
	mustOK(t, os.MkdirAll(r.path("a/sub"), 0o755))
	r.settled("setup")
	r.reset()
	mustOK(t, os.Rename(r.path("a"), r.path("b")))
	mustOK(t, os.Mkdir(r.path("a"), 0o755))
	write(t, r.path("a/f"), "in the new a")
	evs := r.settled("both names settled")
	mi, ri := -1, -1
	for i, e := range evs {
		if moved([]Event{e}, r.path("a"), r.path("b")) {
			mi = i
		}
		if (e.Kind == Rescan && e.Path == r.path("a")) || (e.Kind == Changed && e.Path == r.path("a/f")) {
			ri = i
		}
		if e.Kind == Removed && e.Path == r.path("a") && mi >= 0 {
			t.Errorf("Removed of the new a after the Moved: %v", evs)
		}
	}
	if ri < 0 || (mi >= 0 && ri < mi) {
		t.Errorf("events %v: want the new a announced, after any Moved of the old one", evs)
	}
}
