package watcher

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// A file written and renamed (or deleted, or moved with its directory)
// before the write settled is remembered as written; a file renamed without
// a write, or written and settled, is not.
func TestWrittenSince(t *testing.T) {
	// From the writes of w, gone and d/in to their renames the files must
	// stay pending: a quiet delay far above the few syscalls in between,
	// even on a loaded machine.
	rec := start(t, Options{Quiet: 3 * time.Second, SyncDir: t.TempDir()})
	mustOK(t, os.Mkdir(rec.path("d"), 0o755))
	for _, rel := range []string{"w", "plain", "settled", "gone", "d/in", "x"} {
		write(t, rec.path(rel), "before")
	}
	rec.wait("files settled", func(evs []Event) bool { return has(evs, Rescan, rec.path("d")) && has(evs, Changed, rec.path("gone")) })
	rec.reset()
	start := time.Now().UnixNano()
	time.Sleep(10 * time.Millisecond)

	write(t, rec.path("settled"), "written, then left to settle")
	rec.wait("write settled", func(evs []Event) bool { return has(evs, Changed, rec.path("settled")) })
	// Just emitted as Changed with Written set: still written for a grace
	// period, while the event may be on its way to the consumer.
	if !rec.w.WrittenSince(rec.path("settled"), 0, 0, start) {
		t.Error("WrittenSince(settled) = false right after its Changed")
	}
	write(t, rec.path("w"), "written then renamed")
	write(t, rec.path("gone"), "written then deleted")
	write(t, rec.path("d/in"), "written then its directory moved")
	// The writes are read while the files still have their names (else
	// they count as written with unknown inodes, and so does every file).
	mustOK(t, rec.w.Sync(context.Background()))
	mustOK(t, os.Rename(rec.path("w"), rec.path("w2")))
	mustOK(t, os.Rename(rec.path("plain"), rec.path("plain2")))
	mustOK(t, os.Rename(rec.path("settled"), rec.path("settled2")))
	mustOK(t, os.Remove(rec.path("gone")))
	mustOK(t, os.Rename(rec.path("d"), rec.path("e")))
	write(t, rec.path("x"), "written then renamed twice")
	mustOK(t, rec.w.Sync(context.Background())) // the write is read while x still has its name
	mustOK(t, os.Rename(rec.path("x"), rec.path("x2")))
	mustOK(t, os.Rename(rec.path("x2"), rec.path("x3")))
	rec.wait("renames settled", func(evs []Event) bool { return has(evs, Rescan, rec.path("e")) })

	later := time.Now().Add(writtenGrace + time.Second)
	for rel, want := range map[string]bool{"w": true, "gone": true, "d/in": true, "plain": false, "settled": false,
		"w2": false, "e/in": false} {
		if got := rec.w.writes.since(rec.path(rel), inodeID{}, start, later); got != want {
			t.Errorf("WrittenSince(%s) after the grace period = %v, want %v", rel, got, want)
		}
	}
	if rec.w.writes.since(rec.path("w"), inodeID{}, time.Now().UnixNano(), later) {
		t.Error("WrittenSince(w, now) = true: the write was before now")
	}
	// Known by neither its first nor its last name: by its inode.
	x3 := inodeOf(rec.path("x3"))
	if !rec.w.writes.since(rec.path("x3"), x3, start, later) {
		t.Error("x3 (written as x, renamed twice) not written by inode")
	}
	if rec.w.writes.since(rec.path("x3"), inodeID{}, start, later) {
		t.Error("x3 written by path: its name was never written")
	}
}

// A written path counts as written from its first Write event until a
// grace period after its Changed went out.
func TestWrittenPendingUntilGrace(t *testing.T) {
	l := newWriteLog()
	t0 := time.Now()
	l.written("/r/f", inodeID{}, t0)
	if !l.since("/r/f", inodeID{}, t0.Add(time.Hour).UnixNano(), t0.Add(time.Hour)) {
		t.Error("a write not yet emitted must count, whatever the record's age")
	}
	l.emitted("/r/f", inodeID{}, t0)
	if !l.since("/r/f", inodeID{}, t0.UnixNano(), t0.Add(writtenGrace/2)) {
		t.Error("within the grace period after emission it must count")
	}
	if l.since("/r/f", inodeID{}, t0.UnixNano(), t0.Add(writtenGrace+time.Second)) {
		t.Error("after the grace period it must not")
	}
	id := inodeID{1, 2}
	l.written("/r/d", id, t0)
	l.emitted("/r/d", id, t0)
	l.written("/r/d", id, t0) // written again while its Changed is on its way
	l.delivered("/r/d")
	if !l.since("/r/d", id, t0.UnixNano(), t0) {
		t.Error("Delivered must not forget a write that came after the event went out")
	}
	l.emitted("/r/d", id, t0)
	l.delivered("/r/d")
	if l.since("/r/d", id, t0.UnixNano(), t0) || l.since("/r/other", id, t0.UnixNano(), t0) {
		t.Error("a delivered write must no longer count, by path or inode")
	}
	l.note("/r/renamed-at-once", inodeID{}, t0) // its inode was never known
	if !l.since("/r/any", inodeID{3, 4}, t0.UnixNano(), t0.Add(unknownWindow/2)) ||
		l.since("/r/any", inodeID{3, 4}, t0.UnixNano(), t0.Add(unknownWindow+time.Second)) {
		t.Error("a written file of unknown inode must make every older record count as written, for unknownWindow")
	}
	l.lose(t0)
	if !l.since("/r/g", inodeID{}, t0.UnixNano(), t0.Add(time.Minute)) || l.since("/r/g", inodeID{}, t0.Add(time.Second).UnixNano(), t0.Add(time.Minute)) {
		t.Error("after lost events, records hashed before count as written and later ones do not")
	}
}

// Past writtenMax paths the log forgets them and answers "written" for
// anything hashed before it forgot, until the window has passed.
func TestWriteLogOverflow(t *testing.T) {
	l := newWriteLog()
	t0 := time.Now()
	for i := range writtenMax {
		l.note(fmt.Sprint("/r/f", i), inodeID{1, uint64(i) + 1}, t0)
	}
	if !l.since("/r/f1", inodeID{}, t0.UnixNano(), t0) || l.since("/r/other", inodeID{}, t0.UnixNano(), t0) {
		t.Fatal("before overflow: wrong answers")
	}
	t1 := t0.Add(time.Second)
	l.note("/r/one-more", inodeID{1, 1 << 40}, t1)
	if len(l.at) != 1 {
		t.Errorf("after overflow %d entries, want 1", len(l.at))
	}
	if !l.since("/r/other", inodeID{}, t0.UnixNano(), t1) {
		t.Error("a path hashed before the overflow must count as possibly written")
	}
	if l.since("/r/other", inodeID{}, t1.Add(time.Millisecond).UnixNano(), t1) {
		t.Error("a path hashed after the overflow must not")
	}
	if l.since("/r/other", inodeID{}, t0.UnixNano(), t1.Add(writtenWindow+time.Second)) {
		t.Error("the overflow must be forgotten after the window")
	}
	if l.since("/r/one-more", inodeID{}, t1.UnixNano(), t1.Add(writtenWindow+time.Second)) {
		t.Error("an entry must be forgotten after the window")
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Every file under a renamed watched directory counts as written for a
// record older than the rename, within the window.
func TestWrittenUnderRenamedDir(t *testing.T) {
	l := newWriteLog()
	t0 := time.Now()
	l.dirRenamed("/r/d", t0)
	for _, c := range []struct {
		path  string
		since time.Time
		now   time.Time
		want  bool
	}{
		{"/r/d/a/f", t0.Add(-time.Second), t0, true},
		{"/r/d/f", t0.Add(-time.Second), t0.Add(time.Minute), true},
		{"/r/d/a/f", t0.Add(time.Second), t0.Add(2 * time.Second), false}, // hashed after the rename
		{"/r/e/f", t0.Add(-time.Second), t0, false},
		{"/r/dd/f", t0.Add(-time.Second), t0, false},
		{"/r/d/a/f", t0.Add(-time.Second), t0.Add(writtenWindow + time.Second), false},
	} {
		if got := l.since(c.path, inodeID{}, c.since.UnixNano(), c.now); got != c.want {
			t.Errorf("since(%s, %v after the rename) at %v = %v, want %v", c.path, c.since.Sub(t0), c.now.Sub(t0), got, c.want)
		}
	}
}
