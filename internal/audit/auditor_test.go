package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/store"
)

// A pass verifies every record once: each one's VerifiedAt moves past the
// pass's start, the summary counts them all as ok, coverage is complete,
// and the next run begins a new pass that reads them all again.
func TestPassVerifiesEverything(t *testing.T) {
	root := t.TempDir()
	files := writeFiles(t, root, 60)
	e := newEnv(t, root, envOptions())
	before := time.Now().UnixNano()
	s := e.run(StartOptions{})
	if s.StoppedBy != StopDone || s.Found(OK) != 60 || len(s.Counts) != 1 {
		t.Fatalf("run: %+v\n%s", s, e.log)
	}
	for _, p := range files {
		if r := e.record(p); r.VerifiedAt < before || r.VerifiedAt <= r.HashedAt || r.State != store.StateOK {
			t.Fatalf("%s not verified: %+v", p, r)
		}
	}
	st := e.a.Status()
	if st.Last == nil || st.Last.Counts["ok"] != 60 || st.Last.Files != 60 || st.Pass != nil {
		t.Fatalf("status after the pass: last %+v, pass %+v", st.Last, st.Pass)
	}
	if st.Coverage.Files != 60 || st.Coverage.Total != 60 || st.State != "idle" {
		t.Fatalf("coverage %+v, state %s", st.Coverage, st.State)
	}
	if s := e.run(StartOptions{}); s.Found(OK) != 60 {
		t.Fatalf("second pass: %+v", s)
	}
	if st := e.a.Status(); st.Last.ID != 2 || st.Totals["ok"] != 120 {
		t.Fatalf("after two passes: last %+v, totals %v", st.Last, st.Totals)
	}
}

// Each kind of change is told apart: an edit with a new mtime and a
// deletion are handed to the indexer, which records them; content that
// changed with every stat field the same is corrupt, its record and key
// kept; a same-size rewrite with the mtime put back that nothing saw (no
// watcher here) moved only the ctime: changed without a trace, its key
// kept until accepted.
func TestClassifiesChanges(t *testing.T) {
	e := newEnv(t, "", envOptions())
	for _, rel := range []string{"edited", "restored", "deleted", "rotten", "fine"} {
		e.write(rel, "original "+rel)
	}
	e.ix.Rescan(e.root)
	e.settle()
	// Behind the indexer's back (no watcher).
	if err := os.WriteFile(e.path("edited"), []byte("edited, a new mtime"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(e.path("restored"))
	waitFor(t, "the clock to move past the ctime", func() bool { return time.Now().After(time.Unix(0, e.record(e.path("restored")).CtimeNs)) })
	if err := os.WriteFile(e.path("restored"), []byte("original XXXXXXXX"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(e.path("restored"), fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.path("deleted")); err != nil {
		t.Fatal(err)
	}
	rotten := e.rot(e.path("rotten"))

	s := e.run(StartOptions{})
	want := map[string]int64{"ok": 1, "modified": 1, "missing": 1, "corrupt": 1, "untraced": 1}
	for c, n := range want {
		if s.Counts[c] != n {
			t.Fatalf("counts %v, want %v\n%s", s.Counts, want, e.log)
		}
	}
	e.settle()
	if r := e.record(e.path("edited")); string(r.Digest) != string(digestOf("edited, a new mtime")) || r.State != store.StateOK {
		t.Errorf("edited: the indexer did not record the new content: %+v", r)
	}
	if r := e.record(e.path("restored")); string(r.Digest) != string(digestOf("original restored")) || r.State != store.StateUntraced {
		t.Errorf("restored: the key was not kept, flagged untraced: %+v", r)
	}
	if _, ok, _ := e.st.Get([]byte(e.path("deleted"))); ok {
		t.Error("the deleted file's record is still there")
	}
	r := e.record(e.path("rotten"))
	if r.State != store.StateCorrupt || !bytes.Equal(r.Digest, rotten.Digest) || r.HashedAt != rotten.HashedAt {
		t.Fatalf("corrupt record changed: %+v, was %+v", r, rotten)
	}
	ps := e.problems()
	if len(ps) != 2 || ps[e.path("restored")].Class != Untraced || e.a.Status().Problems != 2 {
		t.Fatalf("problems %v, %d counted", ps, e.a.Status().Problems)
	}
	p := ps[e.path("rotten")]
	if p.Class != Corrupt || !bytes.Equal(p.Recorded, rotten.Digest) || !bytes.Equal(p.Observed, digestOf("original rotten")) ||
		p.ObservedKey != keyOf(t, e.path("rotten"), []byte("original rotten")) || p.RecordedKey == "" {
		t.Fatalf("problem %+v", p)
	}
	if !strings.Contains(e.log.String(), "audit found a problem") || !strings.Contains(e.log.String(), "class=corrupt") {
		t.Errorf("no log line for the problem:\n%s", e.log)
	}
	// The indexer keeps the finding: a rescan does not re-key it.
	e.ix.Rescan(e.root)
	e.settle()
	if r := e.record(e.path("rotten")); r.State != store.StateCorrupt || !bytes.Equal(r.Digest, rotten.Digest) {
		t.Fatalf("a rescan replaced the corrupt record: %+v", r)
	}
	// Accepting takes the content as it is now.
	res, err := e.a.Accept(context.Background(), []byte(e.path("rotten")))
	if err != nil || len(res.Accepted) != 1 {
		t.Fatalf("accept: %+v, %v", res, err)
	}
	if r := e.record(e.path("rotten")); r.State != store.StateOK || !bytes.Equal(r.Digest, digestOf("original rotten")) {
		t.Fatalf("after accept: %+v", r)
	}
	if ps := e.problems(); len(ps) != 1 || ps[e.path("restored")].Class != Untraced {
		t.Fatalf("problems after accept: %v", ps)
	}
	if _, err := e.a.Accept(context.Background(), []byte(e.path("rotten"))); err == nil {
		t.Fatal("a second accept found something to accept")
	}
	if res, err := e.a.Accept(context.Background(), []byte(e.path("restored"))); err != nil || len(res.Accepted) != 1 {
		t.Fatalf("accept of the untraced rewrite: %+v, %v", res, err)
	}
	if r := e.record(e.path("restored")); r.State != store.StateOK || !bytes.Equal(r.Digest, digestOf("original XXXXXXXX")) {
		t.Fatalf("after accept: %+v", r)
	}
	if s := e.run(StartOptions{}); s.Found(OK) != 4 || len(s.Counts) != 1 {
		t.Fatalf("the next pass: %+v", s.Counts)
	}
}

// A corrupt record found again by the next pass stays one problem; when
// its content matches again it is ok and no longer listed.
func TestCorruptRecheckedEachPass(t *testing.T) {
	e := newEnv(t, "", envOptions())
	e.write("f", "content")
	e.ix.Rescan(e.root)
	e.settle()
	good := e.record(e.path("f"))
	e.rot(e.path("f"))
	for range 2 {
		if s := e.run(StartOptions{}); s.Found(Corrupt) != 1 {
			t.Fatalf("pass: %+v", s.Counts)
		}
		if n := len(e.problems()); n != 1 {
			t.Fatalf("%d problems", n)
		}
	}
	// The storage recovered (the record holds the right digest again).
	r := e.record(e.path("f"))
	r.Digest = good.Digest
	if err := e.st.Put(context.Background(), []byte(e.path("f")), r); err != nil {
		t.Fatal(err)
	}
	if s := e.run(StartOptions{}); s.Found(OK) != 1 {
		t.Fatalf("recovered: %+v", s.Counts)
	}
	if r := e.record(e.path("f")); r.State != store.StateOK {
		t.Fatalf("recovered record: %+v", r)
	}
	if n := len(e.problems()); n != 0 {
		t.Fatalf("%d problems after recovery", n)
	}
}

// An audit never overwrites a record the indexer wrote after the audit
// read the old one: the finding is dropped and the file counts as
// modified.
func TestIndexerWriteWins(t *testing.T) {
	e := newEnv(t, "", envOptions())
	e.write("f", "first")
	e.ix.Rescan(e.root)
	e.settle()
	var once sync.Once
	testHookBeforeAct = func(path string, v Verdict) {
		if path != e.path("f") || v.Class != OK {
			return
		}
		once.Do(func() {
			e.write("f", "second, written while the audit decided")
			if _, err := e.ix.Lookup(context.Background(), e.path("f"), true); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(func() { testHookBeforeAct = nil })
	s := e.run(StartOptions{})
	if s.Found(Modified) != 1 || s.Found(OK) != 0 {
		t.Fatalf("counts %v", s.Counts)
	}
	if r := e.record(e.path("f")); !bytes.Equal(r.Digest, digestOf("second, written while the audit decided")) || r.VerifiedAt != r.HashedAt {
		t.Fatalf("the audit replaced the indexer's record: %+v", r)
	}
}

// A file the indexer holds is left and tried again once it is released.
func TestBusyFileRetried(t *testing.T) {
	e := newEnv(t, "", envOptions())
	e.write("a", "a")
	e.write("b", "b")
	e.ix.Rescan(e.root)
	e.settle()
	var once sync.Once
	held := make(chan struct{})
	testHookBeforeAct = func(path string, v Verdict) {
		if v.Class == Busy {
			once.Do(func() { close(held) })
		}
	}
	t.Cleanup(func() { testHookBeforeAct = nil })
	busy := &busyIndexer{Indexer: e.ix, path: e.path("a")}
	busy.hold.Store(true)
	e.a.o.Indexer = busy
	id, err := e.a.Start(context.Background(), StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-held
	busy.hold.Store(false)
	s, err := e.a.WaitRun(context.Background(), id)
	if err != nil || s.Found(OK) != 2 {
		t.Fatalf("run: %+v, %v", s, err)
	}
}

// A run stopped by its time limit leaves the pass in progress; the next
// run goes on with it and no file is counted twice.
func TestTimeLimitThenResume(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, 40)
	o := envOptions()
	o.MaxRate = 10_000 // the 69 kB take at least 6.8 s
	e := newEnv(t, root, o)
	s := e.run(StartOptions{TimeLimit: 2 * time.Second})
	if s.StoppedBy != StopTimeLimit || s.Found(OK) >= 40 {
		t.Fatalf("limited run: %+v", s)
	}
	st := e.a.Status()
	if st.Pass == nil || st.Pass.Done != s.Found(OK) || st.Last != nil {
		t.Fatalf("pass after the limited run: %+v, last %+v", st.Pass, st.Last)
	}
	rest := e.run(StartOptions{FullSpeed: true})
	if rest.StoppedBy != StopDone || s.Found(OK)+rest.Found(OK) != 40 {
		t.Fatalf("first run %d ok, second %+v", s.Found(OK), rest)
	}
	if l := e.a.Status().Last; l == nil || l.Counts["ok"] != 40 || len(l.Counts) != 1 {
		t.Fatalf("pass summary %+v", l)
	}
}

// Pausing stops the run and survives a restart; resuming lets it go on.
func TestPauseSurvivesRestart(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, 30)
	o := envOptions()
	o.MaxRate = 2_000 // the 46 kB take at least 22 s
	e := newEnv(t, root, o)
	ctx := context.Background()
	id, err := e.a.Start(ctx, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a file verified", func() bool { return e.a.Status().Pass != nil && e.a.Status().Pass.Done > 0 })
	if err := e.a.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	s, _ := e.a.WaitRun(ctx, id)
	if s.StoppedBy != StopPaused {
		t.Fatalf("paused run stopped by %q", s.StoppedBy)
	}
	o.Disabled = false // scheduled runs on: the pass in progress goes on at once
	o.Every = time.Hour
	o.MaxRate = -1
	e.restart(o)
	st := e.a.Status()
	if st.State != "paused" || st.Reason != "paused by the user" || st.Pass == nil || st.Run != nil {
		t.Fatalf("after restart: %s %q, pass %+v, run %+v", st.State, st.Reason, st.Pass, st.Run)
	}
	done := st.Pass.Done
	if err := e.a.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pass to complete", func() bool { l := e.a.Status().Last; return l != nil && l.ID == st.Pass.ID })
	if l := e.a.Status().Last; l.Counts["ok"] != 30 || done == 0 {
		t.Fatalf("pass summary %+v (done before the restart: %d)", l, done)
	}
}

// A scheduled pass starts on its own once due, keeps to its windows, and
// says when the next one is due.
func TestSchedule(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, 5)
	o := envOptions()
	o.Disabled = false
	o.Every = 3 * time.Second
	e := newEnv(t, root, o)
	waitFor(t, "a scheduled pass", func() bool { return e.a.Status().Last != nil })
	st := e.a.Status()
	if st.Last.Counts["ok"] != 5 {
		t.Fatalf("scheduled pass %+v", st.Last)
	}
	waitFor(t, "the next due time", func() bool { st := e.a.Status(); return st.State == "idle" && !st.NextRun.IsZero() })
	st = e.a.Status()
	due := time.Unix(0, st.Last.Cutoff).Add(3 * time.Second)
	if st.NextRun.After(due) || st.NextRun.Before(due.Add(-1500*time.Millisecond)) || !strings.HasPrefix(st.Reason, "the next pass is due in ") {
		t.Fatalf("next run %v (%q), want up to %v", st.NextRun, st.Reason, due)
	}

	// A window that opens in twelve hours: nothing runs until then.
	start := time.Now().Add(12 * time.Hour)
	o.Windows = []string{start.Format("15:04") + "-" + start.Add(time.Hour).Format("15:04")}
	e.restart(o)
	waitFor(t, "the plan", func() bool {
		return strings.HasPrefix(e.a.Status().Reason, "waiting for the run window, which opens in ")
	})
	if next := e.a.Status().NextRun; next.Before(start.Add(-time.Minute)) || next.After(start) {
		t.Fatalf("next run %v, want the window at %v", next, start)
	}
}

// While a gate is closed the run waits and says why; it goes on once the
// gate opens.
func TestGateWaits(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, 10)
	proc := t.TempDir()
	loadavg := filepath.Join(proc, "loadavg")
	if err := os.WriteFile(loadavg, []byte("64.00 64.00 64.00 1/1 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := envOptions()
	o.MaxLoad = 1
	o.GatePoll = 20 * time.Millisecond
	o.ProcDir = proc
	e := newEnv(t, root, o)
	id, err := e.a.Start(context.Background(), StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run to wait", func() bool { return e.a.Status().State == "waiting" })
	if st := e.a.Status(); !strings.Contains(st.Reason, "load average") || st.Pass.Done != 0 {
		t.Fatalf("waiting: %q, done %d", st.Reason, st.Pass.Done)
	}
	if err := os.WriteFile(loadavg, []byte("0.10 0.10 0.10 1/1 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := e.a.WaitRun(context.Background(), id)
	if err != nil || s.Found(OK) != 10 {
		t.Fatalf("after the gate opened: %+v, %v", s, err)
	}
}

// The on_problem command gets the problem's JSON, at most once an
// interval; names that are not UTF-8 go as path_b64.
func TestOnProblem(t *testing.T) {
	out := filepath.Join(t.TempDir(), "notified")
	o := envOptions()
	o.OnProblem = []string{"sh", "-c", "cat >> " + out}
	o.OnProblemEvery = time.Hour
	e := newEnv(t, "", o)
	e.write("caf\xe9", "one")
	e.write("b", "two")
	e.ix.Rescan(e.root)
	e.settle()
	e.rot(e.path("caf\xe9"))
	e.rot(e.path("b"))
	if s := e.run(StartOptions{}); s.Found(Corrupt) != 2 {
		t.Fatalf("counts %v", s.Counts)
	}
	waitFor(t, "the command", func() bool { b, _ := os.ReadFile(out); return bytes.Count(b, []byte("\n")) >= 1 })
	b, _ := os.ReadFile(out)
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) != 1 {
		t.Fatalf("%d notifications within the interval: %s", len(lines), b)
	}
	var got map[string]any
	if err := json.Unmarshal(lines[0], &got); err != nil {
		t.Fatal(err)
	}
	if got["state"] != "corrupt" || (got["path"] == nil) == (got["path_b64"] == nil) || got["recorded_key"] == "" {
		t.Fatalf("notification %s", lines[0])
	}
}

// A run asked for and replaced by another before it began, or dropped by a
// pause, still ends for whoever waits on it; a run narrowed to a path reads
// only the records below it.
func TestStartReplacesAndNarrows(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, 20)
	e := newEnv(t, root, envOptions())
	ctx := context.Background()
	// Once the scheduler waits (it looks at pending runs only when woken),
	// a run left pending stays so until Start wakes it.
	waitFor(t, "the scheduler to wait", func() bool { return e.a.Status().Reason == "scheduled audits are off" })
	e.a.mu.Lock()
	first := e.a.newRun(StartOptions{}, true)
	e.a.pending = first
	e.a.mu.Unlock()
	id, err := e.a.Start(ctx, StartOptions{Paths: [][]byte{[]byte(filepath.Join(root, "d1") + "/")}})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := e.a.WaitRun(ctx, first.id); err != nil || s.StoppedBy != StopSuperseded {
		t.Fatalf("replaced run: %+v, %v", s, err)
	}
	s, err := e.a.WaitRun(ctx, id)
	if err != nil || s.StoppedBy != StopDone || s.Found(OK) != 4 || string(s.Paths[0]) != filepath.Join(root, "d1") {
		t.Fatalf("narrowed run: %+v, %v", s, err)
	}
	for _, p := range []string{"d1/f001.dat", "d2/f002.dat"} {
		r := e.record(filepath.Join(root, p))
		if verified := r.VerifiedAt > r.HashedAt; verified != strings.HasPrefix(p, "d1/") {
			t.Fatalf("%s verified %v", p, verified)
		}
	}
	if _, err := e.a.WaitRun(ctx, 999); err == nil {
		t.Fatal("WaitRun of an unknown run")
	}
	if _, err := e.a.Start(ctx, StartOptions{Paths: [][]byte{[]byte("relative")}}); err == nil {
		t.Fatal("a relative path was accepted")
	}
}
