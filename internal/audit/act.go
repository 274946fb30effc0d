package audit

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher/mbsha256"
	"github.com/annexd/annexd/store"
)

// outcome is what checking one file found.
type outcome struct {
	f      Facts
	v      Verdict
	readAt int64 // when the first read began
}

// observed is the digest the audit read, the second read's when there was one.
func (o *outcome) observed() []byte {
	switch {
	case o.f.Second != nil && o.f.Second.Err == nil:
		return o.f.Second.Digest
	case o.f.First != nil && o.f.First.Err == nil:
		return o.f.First.Digest
	}
	return nil
}

// source is where the bytes of the read that decided came from: the
// second read's when there was one.
func (o *outcome) source() Source {
	switch {
	case o.f.Second != nil && o.f.Second.Err == nil:
		return o.f.Second.Source
	case o.f.First != nil && o.f.First.Err == nil:
		return o.f.First.Source
	}
	return FromDevice
}

// testHookBeforeAct, set only by tests, runs between deciding on a file
// and acting on the verdict.
var testHookBeforeAct func(path string, v Verdict)

// worker checks the files of jobs on a thread of its own in the idle I/O
// class, reading chunk bytes at a time, and acts on what it finds. left
// counts files left undecided.
func (a *Auditor) worker(ctx context.Context, r *run, lanes *mbsha256.Lanes, chunk int, jobs <-chan store.Due, left *atomic.Int64) {
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, and its I/O class with it
	if err := idleIO(); err != nil {
		a.noteIO("not set: " + err.Error())
	}
	var rd *reader
	if lanes != nil {
		rd = newLaneReader(lanes, chunk)
	} else {
		rd = newReader(r.pace, chunk)
	}
	for d := range jobs {
		if ctx.Err() != nil {
			continue
		}
		out := a.check(ctx, rd, &d, func() int { return a.looksBefore(r, string(d.Path)) })
		if testHookBeforeAct != nil {
			testHookBeforeAct(string(d.Path), out.v)
		}
		if !a.recorder.act(ctx, r, &d, &out) {
			left.Add(1)
		}
	}
}

// looksBefore says how often the run met path before and left it
// undecided.
func (a *Auditor) looksBefore(r *run, path string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return r.attempts[path]
}

// recorder acts on a verdict: it writes the record and the entry, hands
// a changed file to the indexer, and counts, logs and notifies. The
// counts (the run's, the pass's, the daemon's) are guarded by the
// Auditor's mu.
type recorder struct {
	st     Store
	o      *Options // the Auditor's, for the Indexer; read only
	log    *slog.Logger
	note   *notifier
	book   *book
	stamps *stamps
	mu     *sync.Mutex // the Auditor's
	passes *passes
	tally  *tally
}

// act carries out a verdict. It reports false for a file left undecided.
func (a *recorder) act(ctx context.Context, r *run, d *store.Due, out *outcome) bool {
	path := string(d.Path)
	switch c := out.v.Class; c {
	case Busy, Retry:
		a.mu.Lock()
		r.attempts[path]++
		if out.f.Away { // left to a later pass: it comes back with its disk
			r.attempts[path] = maxAttempts
		}
		if r.attempts[path] >= maxAttempts {
			r.left[path] = leftFile{size: d.Record.Size, away: out.f.Away}
		}
		a.mu.Unlock()
		if c == Retry && ctx.Err() == nil {
			a.log.Debug("audit will try a file again", "path", path, "why", out.v.Why)
		}
		return false
	case OK:
		if out.v.Transient {
			a.log.Warn("a read returned wrong bytes once; a second read from the disk matched", "path", path)
			a.mu.Lock()
			r.transient++
			a.tally.transient++
			a.mu.Unlock()
		}
		if d.Record.State == store.StateOK {
			a.verify(r, d, out.source(), out.f.Before)
			return true
		}
		return a.clear(ctx, r, d, out.source(), out.f.Before)
	case Corrupt, Unreadable, Untraced:
		return a.flag(ctx, r, d, out)
	case LostWrite:
		return a.rekey(ctx, r, d, out)
	}
	return a.handOver(ctx, r, d, out)
}

// verify records that d still has its digest: its VerifiedAt moves to a
// time later than every verification before it, and the write is
// submitted in that order; the acknowledgment counts it, as read from
// src. A file fi whose ctime alone moved (a chmod) takes it into its
// record.
func (a *recorder) verify(r *run, d *store.Due, src Source, fi fsstat.FileInfo) {
	a.stamps.stamp(func(t int64) {
		rec := d.Record
		rec.VerifiedAt = t
		takeCtime(&rec, fi)
		r.inflight.Add(1)
		a.st.Submit(store.Change{Op: store.OpPutIf, Path: d.Path, Record: rec, Expect: d.Record}, func(err error) {
			defer r.inflight.Done()
			a.verified(r, d, t, err, src)
		})
	})
}

// verified counts a verification once the index has it, apart when its
// bytes came from the page cache only. It runs on the index's writer
// goroutine: it only counts.
func (a *recorder) verified(r *run, d *store.Due, t int64, err error, src Source) {
	a.mu.Lock()
	defer a.mu.Unlock()
	path := string(d.Path)
	switch {
	case err == nil:
		a.tally.count(r, OK)
		a.tally.verified(r, d.Record.Size, src)
		if p := a.passes.state.Pass; p != nil && d.Record.Checked() < p.Cutoff {
			a.passes.passUncount(path)
			p.OK++
			p.OKBytes += d.Record.Size
			p.At = t
		}
	case errors.Is(err, store.ErrConflict):
		// The indexer wrote a newer record meanwhile: it is the indexer's.
		a.tally.count(r, Modified)
	default:
		r.attempts[path]++
		a.log.Warn("cannot record a verification", "path", path, "err", err)
		return
	}
	r.seen[path] = true
}

// conditional applies rec in place of d's record unless the indexer
// replaced it meanwhile (store.ErrConflict).
func (a *recorder) conditional(ctx context.Context, d *store.Due, rec store.Record) error {
	return commit(a.st, store.Change{Op: store.OpPutIf, Path: d.Path, Record: rec, Expect: d.Record})
}

// clear turns a record flagged by an earlier pass back to ok: its content
// matches again (a transient fault, storage that recovered, or the file
// restored from a backup); src is where the bytes came from.
func (a *recorder) clear(ctx context.Context, r *run, d *store.Due, src Source, fi fsstat.FileInfo) bool {
	rec := d.Record
	rec.State = store.StateOK
	takeCtime(&rec, fi)
	var err error
	a.stamps.stamp(func(t int64) {
		rec.VerifiedAt = t
		err = a.conditional(ctx, d, rec)
	})
	if err == nil {
		err = a.book.deleteEntry(ctx, string(d.Path))
	}
	a.verified(r, d, rec.VerifiedAt, err, src)
	if err == nil {
		a.log.Info("a file flagged before matches its record again", "path", string(d.Path), "was", d.Record.State.String())
	}
	return true
}

// flag marks the record corrupt, untraced or unreadable, keeping its
// digest, and files the problem. A file whose ctime alone moved (a chmod,
// or the change left no other trace) takes it into its record, so the
// indexer leaves the finding in place until the file changes again.
func (a *recorder) flag(ctx context.Context, r *run, d *store.Due, out *outcome) bool {
	rec := d.Record
	rec.State = flagState[out.v.Class]
	if out.f.BeforeErr == nil {
		takeCtime(&rec, out.f.Before)
	}
	return a.finding(ctx, r, d, out, rec, out.observed())
}

// flagState is the record state of each class a record is flagged with.
var flagState = map[Class]store.State{Corrupt: store.StateCorrupt, Untraced: store.StateUntraced, Unreadable: store.StateUnreadable}

// flaggedClass is the class a record in state st was flagged with:
// Corrupt, Untraced, or 0.
func flaggedClass(st store.State) Class {
	switch st {
	case store.StateCorrupt:
		return Corrupt
	case store.StateUntraced:
		return Untraced
	}
	return 0
}

// feedFinding names a finding of class c in the change feed
// (store.Change.Finding): rot, not an edit. An unreadable file is not rot.
func feedFinding(c Class) string {
	if c == Unreadable {
		return ""
	}
	return c.String()
}

// takeCtime gives rec the ctime of fi when that alone moved.
func takeCtime(rec *store.Record, fi fsstat.FileInfo) {
	if onlyCtimeMoved(rec, fi) {
		rec.CtimeNs = fi.CtimeNs
	}
}

// probeOpen opens the file at path and closes it again.
func probeOpen(path string) error {
	fd, err := openNoFollow(path)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return unix.Close(fd)
}

// rekey records the bytes the disk holds after a lost write: the record
// takes the digest read, and the finding is filed so the user learns that
// the last write before the shutdown did not survive.
func (a *recorder) rekey(ctx context.Context, r *run, d *store.Due, out *outcome) bool {
	rec := d.Record
	rec.Digest = out.observed()
	rec.HashedAt, rec.VerifiedAt, rec.State = out.readAt, out.readAt, store.StateOK
	return a.finding(ctx, r, d, out, rec, rec.Digest)
}

// finding writes rec conditionally and, when it was written, the entry of
// the problem; then counts, logs and notifies.
func (a *recorder) finding(ctx context.Context, r *run, d *store.Due, out *outcome, rec store.Record, observed []byte) bool {
	path := string(d.Path)
	c := out.v.Class
	err := commit(a.st, store.Change{Op: store.OpPutIf, Path: d.Path, Record: rec, Expect: d.Record, Finding: feedFinding(c)})
	if errors.Is(err, store.ErrConflict) {
		a.mu.Lock()
		a.tally.count(r, Modified)
		r.seen[path] = true
		a.mu.Unlock()
		return true
	}
	e := a.newEntry(d, c, out.v.Why, observed)
	e.HashedAt, e.Dev, e.Ino = rec.HashedAt, rec.Dev, rec.Ino
	if c == Unreadable {
		e.Prior = out.f.Standing.String()
		if !out.f.Standing.keyKept() {
			e.Prior = ""
		}
	}
	if err == nil {
		err = a.book.putEntry(ctx, d.Path, e)
	}
	if err != nil {
		a.mu.Lock()
		r.attempts[path]++
		a.mu.Unlock()
		a.log.Warn("cannot record an audit finding", "path", path, "class", c.String(), "err", err)
		return false
	}
	a.counted(r, d, c, e.Pass)
	p := e.problem(path)
	a.log.Warn("audit found a problem", "class", c.String(), "path", path, "recorded", p.RecordedKey,
		"observed", p.ObservedKey, "why", out.v.Why)
	a.note.send(p)
	return true
}

// handOver gives a modified or missing file to the indexer, and files an
// entry so that the pass neither reads nor counts it again.
func (a *recorder) handOver(ctx context.Context, r *run, d *store.Due, out *outcome) bool {
	path := string(d.Path)
	if out.v.Class == Missing && a.moved(d) {
		// The indexer moved or dropped the record since the pass took it
		// from the index (a rename during the pass): no finding of the
		// run or the pass, which count the file where its record is now,
		// if at all.
		a.mu.Lock()
		r.seen[path] = true
		a.mu.Unlock()
		return true
	}
	if a.o.Indexer != nil {
		a.o.Indexer.Changed(ctx, path)
	}
	e := a.newEntry(d, out.v.Class, out.v.Why, out.observed())
	if err := a.book.putEntry(ctx, d.Path, e); err != nil {
		a.mu.Lock()
		r.attempts[path]++
		a.mu.Unlock()
		return false
	}
	a.counted(r, d, out.v.Class, e.Pass)
	a.log.Debug("audit handed a changed file to the indexer", "path", path, "class", out.v.Class.String(), "why", out.v.Why)
	return true
}

// moved reports whether the index no longer holds d's record at its
// path: removed, or replaced by another file's.
func (a *recorder) moved(d *store.Due) bool {
	rec, ok, err := a.st.Get(d.Path)
	return err == nil && (!ok || rec.Dev != d.Record.Dev || rec.Ino != d.Record.Ino || rec.HashedAt != d.Record.HashedAt)
}

// newEntry is the entry of a finding about d, counting in the pass in
// progress when d belongs to it.
func (a *recorder) newEntry(d *store.Due, c Class, why string, observed []byte) entry {
	e := entry{Class: c.String(), Backend: d.Record.Backend.String(), Recorded: d.Record.Digest, Observed: observed,
		Size: d.Record.Size, HashedAt: d.Record.HashedAt, Seen: time.Now().UnixNano(), Why: why}
	a.mu.Lock()
	if p := a.passes.state.Pass; p != nil && d.Record.Checked() < p.Cutoff {
		e.Pass = p.ID
	}
	a.mu.Unlock()
	return e
}

// counted adds a finding whose entry, of pass, was written.
func (a *recorder) counted(r *run, d *store.Due, c Class, pass uint64) {
	path := string(d.Path)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tally.count(r, c)
	r.seen[path] = true
	if p := a.passes.state.Pass; p != nil && pass == p.ID {
		a.passes.passCount(path, c)
	}
}

// Problem is a file the audit found not ok: corrupt, unreadable, or with
// a lost write.
type Problem struct {
	Path  []byte
	Class Class
	// RecordedKey is the key of the record the audit judged; ObservedKey
	// that of the bytes it read (empty when it could not read them).
	RecordedKey, ObservedKey string
	Recorded, Observed       []byte // the digests
	Size                     int64
	Seen                     time.Time
	Pass                     uint64
	Why                      string
	filed                    string // where its entry is filed: Path, or the path before a rename
}
