package audit

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annexd/annexd/store"
	"github.com/annexd/annexd/watcher"
)

// The passes completed are kept in the index, oldest first, with what
// each checked and found and the coverage when it ended, across a
// restart.
func TestHistory(t *testing.T) {
	e := newEnv(t, "", envOptions())
	for i, s := range []string{"some bytes", "other bytes", "a third file"} {
		e.write(fmt.Sprintf("f%d.txt", i), s)
	}
	e.ix.Rescan(e.root)
	e.settle()
	e.run(StartOptions{})
	e.rot(e.path("f1.txt"))
	e.run(StartOptions{})
	e.restart(envOptions())
	h, err := e.a.History()
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].ID != 1 || h[1].ID != 2 {
		t.Fatalf("history %+v; want passes 1 and 2", h)
	}
	size := int64(len("some bytes") + len("other bytes") + len("a third file"))
	first, second := h[0], h[1]
	if first.Counts["ok"] != 3 || first.OKBytes != size || first.Problems() != 0 {
		t.Errorf("first pass %+v; want 3 files, %d bytes ok", first, size)
	}
	if second.Counts["ok"] != 2 || second.OKBytes != size-int64(len("other bytes")) || second.Problems() != 1 {
		t.Errorf("second pass %+v; want 2 ok and a corrupt file", second)
	}
	for _, p := range h {
		if p.Cover == nil || p.Cover.Total != 3 || p.Cover.Files != 3 || p.Cover.TotalBytes != size || p.Ended < p.Began {
			t.Errorf("pass %d: coverage %+v, began %d ended %d; want all 3 files checked within the schedule", p.ID, p.Cover, p.Began, p.Ended)
		}
	}
}

// The history keeps the last historyLen passes; a pass completed again
// (a crash before the state was saved) replaces its entry.
func TestHistoryBound(t *testing.T) {
	var h []PassSummary
	for id := uint64(1); id <= historyLen+5; id++ {
		h = withPass(h, &PassSummary{ID: id})
		h = withPass(h, &PassSummary{ID: id, Files: 7})
	}
	if len(h) != historyLen || h[0].ID != 6 || h[len(h)-1].ID != historyLen+5 || h[0].Files != 7 {
		t.Fatalf("%d passes from %+v to %+v; want %d, 6 to %d, each once", len(h), h[0], h[len(h)-1], historyLen, historyLen+5)
	}
	if got := withPass(nil, nil); len(got) != 0 {
		t.Errorf("no pass: %v", got)
	}
}

// A file of a pass in progress that the indexer hashes again (as it does
// the records hashed just before an unclean end, after the restart) is not
// read by the pass: its summary counts it unread, not lost.
func TestPassCountsUnread(t *testing.T) {
	root := t.TempDir()
	paths := writeFiles(t, root, 40)
	o := envOptions()
	o.MaxRate = 10_000 // the 69 kB take at least 6.8 s
	e := newEnv(t, root, o)
	s := e.run(StartOptions{TimeLimit: 2 * time.Second})
	st := e.a.Status()
	if s.StoppedBy != StopTimeLimit || st.Pass == nil {
		t.Fatalf("limited run: %+v, pass %+v", s, st.Pass)
	}
	var rehashed []string
	for _, p := range paths {
		if r := e.record(p); r.Checked() < st.Pass.Cutoff.UnixNano() && len(rehashed) < 3 {
			rehashed = append(rehashed, p)
			e.ix.Rehash(p)
		}
	}
	if len(rehashed) != 3 {
		t.Fatalf("the limited run left %d files of the pass unread, want 3 or more", len(rehashed))
	}
	e.settle()
	for _, p := range rehashed {
		if r := e.record(p); r.Checked() < st.Pass.Cutoff.UnixNano() {
			t.Fatalf("%s not hashed again: %+v", p, r)
		}
	}
	e.run(StartOptions{FullSpeed: true})
	l := e.a.Status().Last
	if l == nil || l.Files != 40 || l.Counts["ok"] != 37 || l.Unread != 3 {
		t.Fatalf("pass summary %+v; want 40 files, 37 ok, 3 unread", l)
	}
}

// Files renamed while a pass runs are not missing in its summary, the
// run's counts or the daemon's totals, though the pass took their old
// names from the index before the renames: they count once, where their
// records are.
func TestPassCountsARenamedFileOnce(t *testing.T) {
	root := t.TempDir()
	paths := writeFiles(t, root, 40)
	o := envOptions()
	o.MaxRate = 10_000 // the 69 kB take at least 6.8 s
	e := newEnv(t, root, o)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := e.a.Start(ctx, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pass to begin", func() bool { st := e.a.Status(); return st.Pass != nil && st.Pass.Done > 0 })
	cutoff := e.a.Status().Pass.Cutoff.UnixNano()
	var renamed int
	for _, p := range slices.Backward(paths) { // read last: the oldest first, all of the same age
		if r := e.record(p); r.Checked() < cutoff && renamed < 4 {
			if err := os.Rename(p, p+".renamed"); err != nil {
				t.Fatal(err)
			}
			e.ix.Changed(ctx, p)
			e.ix.Changed(ctx, p+".renamed")
			renamed++
		}
	}
	e.settle()
	run, err := e.a.WaitRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// Nor in the run's counts, or the daemon's totals.
	if run.Counts["missing"] != 0 || e.a.Status().Totals["missing"] != 0 {
		t.Errorf("the run counts %v, the totals %v; want none missing", run.Counts, e.a.Status().Totals)
	}
	for e.a.Status().Last == nil {
		e.run(StartOptions{FullSpeed: true})
	}
	l := e.a.Status().Last
	var sum int64
	for _, n := range l.Counts {
		sum += n
	}
	// At their new names the indexer took their records over: read by the
	// pass (ok), or after it began (unread); never missing.
	if renamed != 4 || l.Files != 40 || sum+l.Unread != 40 || l.Counts["missing"] != 0 || l.Counts["ok"] < 36 {
		t.Fatalf("%d renamed; pass summary %+v: counted %d and %d unread; want 40 files, 36 or more ok, none missing",
			renamed, l, sum, l.Unread)
	}
}

// heldSource is a watcher's hand-off whose events the test sends, and
// which says it holds changes back while held is set.
type heldSource struct {
	ch      chan watcher.Event
	emitted atomic.Uint64
	held    atomic.Bool
}

func (s *heldSource) Events() <-chan watcher.Event { return s.ch }
func (s *heldSource) Emitted() uint64              { return s.emitted.Load() }
func (s *heldSource) Pending() int {
	if s.held.Load() {
		return 1
	}
	return 0
}

func (s *heldSource) send(evs ...watcher.Event) {
	for _, ev := range evs {
		s.emitted.Add(1)
		s.ch <- ev
	}
}

// A file renamed just before the audit reaches it, whose events the
// watcher still holds: the audit finds it gone at a path where the index
// still has its record. It looks again once the indexer has caught up,
// and counts the file at its new name: not missing at the old one, and
// not handed to the indexer as removed, which would undo the move and
// hash the file again as new.
func TestPassCountsAFileRenamedAheadOfTheIndexerOnce(t *testing.T) {
	root := t.TempDir()
	paths := writeFiles(t, root, 10)
	e := newEnv(t, root, envOptions())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src := &heldSource{ch: make(chan watcher.Event, 4)}
	go func() { _ = e.ix.Follow(ctx, src) }()
	old, now := paths[0], paths[0]+".renamed"
	src.held.Store(true) // the watcher holds the rename's events
	if err := os.Rename(old, now); err != nil {
		t.Fatal(err)
	}
	hashed := e.ix.Progress().FilesHashed
	release := sync.OnceFunc(func() {
		src.send(watcher.Event{Kind: watcher.Removed, Path: old}, watcher.Event{Kind: watcher.Changed, Path: now})
		src.held.Store(false)
	})
	var looks atomic.Int32
	testHookBeforeAct = func(path string, v Verdict) {
		// The first look finds the path gone for the first time, the
		// second while the watcher holds changes: then it lets them go.
		if path == old && looks.Add(1) == 2 {
			release()
		}
	}
	t.Cleanup(func() { testHookBeforeAct = nil })
	s := e.run(StartOptions{FullSpeed: true})
	release()
	e.settle()
	if n := looks.Load(); n < 2 {
		t.Errorf("the audit looked at the old path %d times; want 2 or more", n)
	}
	if s.Counts["missing"] != 0 || e.a.Status().Totals["missing"] != 0 {
		t.Errorf("the run counts %v, the totals %v; want none missing", s.Counts, e.a.Status().Totals)
	}
	l := e.a.Status().Last
	var sum int64
	for _, n := range l.Counts {
		sum += n
	}
	if l.Files != 10 || sum+l.Unread != 10 || l.Counts["missing"] != 0 {
		t.Errorf("pass summary %+v: counted %d and %d unread of 10; want none missing", l, sum, l.Unread)
	}
	if r := e.record(now); r.State != store.StateOK || e.ix.Progress().FilesHashed != hashed {
		t.Errorf("the renamed file: %+v, %d files hashed again; want its record moved, none hashed",
			r, e.ix.Progress().FilesHashed-hashed)
	}
}

// A file removed behind the indexer's back (no event: a folder without a
// watch) while changes elsewhere keep the indexer settling, as on a busy
// machine: the audit puts off counting it for a few looks only, then
// counts it missing, where it was left pass after pass, each 40 s longer.
func TestRemovedFileCountedMissingWhileChangesKeepComing(t *testing.T) {
	root := t.TempDir()
	paths := writeFiles(t, root, 5)
	e := newEnv(t, root, envOptions())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &heldSource{ch: make(chan watcher.Event)}
	src.held.Store(true) // changes keep coming, somewhere else
	go func() { _ = e.ix.Follow(ctx, src) }()
	t.Cleanup(func() { src.held.Store(false) })
	if err := os.Remove(paths[0]); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	s := e.run(StartOptions{FullSpeed: true})
	if s.Counts["missing"] != 1 || s.Left.Files != 0 {
		t.Errorf("the run counts %v, left %d files, in %v; want the removed file missing, none left",
			s.Counts, s.Left.Files, time.Since(began).Round(time.Millisecond))
	}
}

// A flagged file renamed again and again faster than the indexer applies
// the moves can leave its finding filed at several old names (by the
// audit at one, by the indexer's check at another), each following the
// file to its name now: it is listed once there, not once a name it had.
func TestProblemListedOnceAfterRenames(t *testing.T) {
	root := t.TempDir()
	paths := writeFiles(t, root, 3)
	e := newEnv(t, root, envOptions())
	ctx := context.Background()
	old, now := paths[0], paths[0]+".renamed"
	e.rot(old)
	if s := e.run(StartOptions{FullSpeed: true}); s.Counts["corrupt"] != 1 {
		t.Fatalf("audit: %v", s.Counts)
	}
	filed, ok := e.a.book.snapshot()[old]
	if !ok {
		t.Fatalf("no finding filed at %s", old)
	}
	if err := e.a.book.putEntry(ctx, []byte(old+".between"), filed); err != nil { // a name it had between
		t.Fatal(err)
	}
	if err := os.Rename(old, now); err != nil {
		t.Fatal(err)
	}
	e.ix.Changed(ctx, old)
	e.ix.Changed(ctx, now)
	e.settle()
	if r := e.record(now); r.State != store.StateCorrupt {
		t.Fatalf("record at the new name: %+v; want it corrupt", r)
	}
	var listed []string
	if err := e.a.Problems(ctx, func(p Problem) error { listed = append(listed, string(p.Path)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0] != now {
		t.Errorf("problems listed at %q; want once, at %s", listed, now)
	}
}
