package store

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/annexd/annexd/store/internal/indexfile"
	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"
)

// Op is the kind of a Change.
type Op uint8

// The kinds of change.
const (
	// OpPut stores Record at Path, replacing what was there.
	OpPut Op = iota + 1
	// OpDelete removes the record at Path; no error when there is none.
	OpDelete
	// OpDeleteSubtree removes Path and every record below it.
	OpDeleteSubtree
	// OpMove moves the record at Path and every record below it to
	// NewPath, keeping their digests and merging (see Move). ErrNotFound
	// when nothing is at or below Path.
	OpMove
	// OpMark sets the Generation of the record at Path to Gen (no error
	// when there is none).
	OpMark
	// OpDeleteIfOlder removes the record at Path when its Generation is
	// below Gen (what Sweep submits).
	OpDeleteIfOlder
	// OpPutMeta stores Value under the name Path (GetMeta).
	OpPutMeta
	// OpDeleteMeta removes the meta value named Path.
	OpDeleteMeta
	// OpPutIf stores Record at Path only while the record there is still
	// Expect (Record.SameContent); otherwise it fails with ErrConflict and
	// changes nothing. The stored generation is kept.
	OpPutIf
	// OpUnshelve brings the shelved record of file system Record.Dev at
	// Path back (shelf.go), while it is still Record; otherwise it fails
	// with ErrConflict. With Shelve, the record it replaces is shelved
	// when it is of another file system. Gen is the lowest generation it
	// gets.
	OpUnshelve
)

// Change is one write. Only the fields its Op names are used.
type Change struct {
	Op      Op
	Path    []byte
	NewPath []byte
	Record  Record
	Expect  Record // OpPutIf: the record Record was made from
	// Shelve, with OpPut, shelves the record at Path instead of
	// replacing it when it is of another file system than Record
	// (Dev differs; shelf.go).
	Shelve bool
	Gen    uint64
	Value  []byte
	// Fence, with OpDeleteSubtree (DropFenced) or OpDeleteIfOlder
	// (SweepFenced), makes the change conditional (fence.go): when the
	// fence is broken, or a sweep fence was touched at or above Path, by
	// the time the change is applied, nothing changes; the error is a
	// *ConflictError for OpDeleteSubtree, none for OpDeleteIfOlder.
	Fence *Fence
	// Keep, with OpDeleteSubtree, spares the records of the file systems
	// it reports true for (a file system not mounted there now).
	Keep func(dev uint64) bool
	// Finding, with OpPut or OpPutIf, names how the bytes went bad with no
	// write ("corrupt", "lost_write", "untraced"): the feed logs the
	// change as rot.
	Finding string
}

// item is a queued change and whom to tell when it is durable.
type item struct {
	c       Change
	done    func(error)
	removed *atomic.Int64 // counts records removed, for Sweep
	n       int           // records removed by this change, once committed
	gen     *uint64       // receives a new generation
	moved   *Moved        // receives what a move did
	adopt   *Adoption     // the checks and change of an Adopt
	survey  *surveyPut    // what opSurvey stores
	waited  bool          // a caller waits for it (Put, SubmitAll, …): its group does not wait BulkIdle
}

// validate checks a change before it is queued.
func (c *Change) validate() error {
	switch c.Op {
	case OpPut, OpPutIf, OpUnshelve:
		if err := checkPath(c.Path, false); err != nil {
			return err
		}
		return c.Record.Validate()
	case OpDelete, OpMark, OpDeleteIfOlder:
		return checkPath(c.Path, false)
	case OpDeleteSubtree:
		return checkPath(c.Path, true)
	case OpMove:
		if err := checkPath(c.Path, false); err != nil {
			return err
		}
		if err := checkPath(c.NewPath, false); err != nil {
			return err
		}
		if bytes.HasPrefix(c.NewPath, subtreePrefix(c.Path)) || bytes.HasPrefix(c.Path, subtreePrefix(c.NewPath)) {
			return fmt.Errorf("%w: cannot move %q to %q: one contains the other", ErrPath, c.Path, c.NewPath)
		}
		return nil
	case OpPutMeta, OpDeleteMeta:
		if len(c.Path) == 0 {
			return fmt.Errorf("%w: empty meta name", ErrPath)
		}
		return nil
	case opAdopt:
		if err := checkPath(c.Path, false); err != nil {
			return err
		}
		return c.Record.Validate()
	case opNextGen, opSurvey, opUnshelf:
		return nil
	}
	return fmt.Errorf("store: unknown change op %d", c.Op)
}

// Ops that only the store's own methods submit.
const (
	opUnshelf Op = 252 // ForgetShelf: Path is a shelf key
	opSurvey  Op = 253 // PutSurvey, SubmitSurvey
	opAdopt   Op = 254 // Adopt
	opNextGen Op = 255 // NextGeneration
)

// Submit queues c and returns at once, unless the queue is full (then it
// waits for room: back-pressure). done, if not nil, is called exactly once:
// with nil after the change is committed (durable unless Options.NoSync), or
// with the reason it was not made (ErrPath and ErrRecord at once, from
// Submit itself). Changes are applied in the order they were submitted.
// Run must be running (or Close be called) for done to be called. The
// store keeps c's slices (Path, NewPath, Record.Digest, Value) until done
// is called: the caller must not change them before.
//
// done runs on the writer goroutine: it must be quick and must not wait for
// another change (no Put, Delete, … and no Submit that could block on a
// full queue), or the writer deadlocks.
func (s *Store) Submit(c Change, done func(error)) {
	s.submit(item{c: c, done: done})
}

func (s *Store) submit(it item) {
	if it.done == nil {
		it.done = func(error) {}
	}
	if s.opts.ReadOnly {
		it.done(ErrReadOnly)
		return
	}
	err := it.c.validate()
	if err == nil && it.c.Op == opSurvey {
		err = it.survey.validate()
	}
	if err != nil {
		it.done(err)
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		it.done(ErrClosed)
		return
	}
	if !s.q.push(it, s.closing) {
		it.done(ErrClosed)
	}
}

// wait submits it and waits until it is committed or ctx is done. When ctx
// ends first the change may still be made.
func (s *Store) wait(ctx context.Context, it item) error {
	ch := make(chan error, 1)
	it.done = func(err error) { ch <- err }
	it.waited = true
	s.submit(it)
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Put stores r at path and returns once it is durable.
func (s *Store) Put(ctx context.Context, path []byte, r Record) error {
	return s.wait(ctx, item{c: Change{Op: OpPut, Path: path, Record: r}})
}

// DeleteSubtree removes dir and every record below it ("/a" covers "/a"
// and "/a/…" but not "/ab").
func (s *Store) DeleteSubtree(ctx context.Context, dir []byte) error {
	return s.wait(ctx, item{c: Change{Op: OpDeleteSubtree, Path: dir}})
}

// PutMeta stores a named value (calibration, roots, …) for GetMeta.
func (s *Store) PutMeta(ctx context.Context, name string, v []byte) error {
	return s.wait(ctx, item{c: Change{Op: OpPutMeta, Path: []byte(name), Value: bytes.Clone(v)}})
}

// DeleteMeta removes a named value.
func (s *Store) DeleteMeta(ctx context.Context, name string) error {
	return s.wait(ctx, item{c: Change{Op: OpDeleteMeta, Path: []byte(name)}})
}

// NextGeneration allocates a new scan generation, larger than every one
// handed out before on this index.
func (s *Store) NextGeneration(ctx context.Context) (uint64, error) {
	var g uint64
	err := s.wait(ctx, item{c: Change{Op: opNextGen}, gen: &g})
	return g, err
}

// Run is the single writer: it commits queued changes in groups, every
// Options.MaxDelay or Options.MaxBatch changes, whichever comes first (or
// sooner when no change arrived for Options.MaxIdle), and calls their done
// functions after each commit. When ctx is done (or Close
// is called) it commits what is queued and returns nil.
func (s *Store) Run(ctx context.Context) error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	if !s.running.TryLock() {
		return ErrRunning
	}
	defer s.running.Unlock()
	s.writer.Lock() // a settle may be merging (pending.go)
	defer s.writer.Unlock()
	s.hold.stop = ctx.Done() // ends a wait for space (nospace.go)
	select {
	case <-s.closing:
		return ErrClosed
	default:
	}
	d := s.deferred
	d.mergeLogged() // what a cut-short run left pending
	wait := cmp.Or(s.opts.mergeIdle, mergeIdle)
	idle := time.NewTimer(wait)
	defer idle.Stop()
	resting := cmp.Or(s.opts.restAfter, restAfter)
	rest := time.NewTimer(resting)
	defer rest.Stop()
	settle := time.NewTimer(settleAfter(s.opts.DataWindow))
	defer settle.Stop()
	for {
		if d.pending.Load() > 0 {
			idle.Reset(max(wait, time.Until(d.mergeAfter)))
		} else {
			idle.Stop()
		}
		select {
		case <-s.q.ready:
			it, ok := s.q.pop()
			if !ok {
				continue
			}
			s.commit(s.collect(ctx, it))
			if d.due() {
				d.mergeLogged()
			}
			rest.Reset(resting)
			settle.Reset(settleAfter(s.opts.DataWindow))
		case <-rest.C:
			s.rest()
		case <-settle.C:
			s.settled()
		case reply := <-d.settleReq:
			reply <- d.merge()
		case <-d.soon:
			if d.pending.Load() > 0 && time.Now().After(d.mergeAfter) {
				d.mergeLogged()
			}
		case <-idle.C:
			d.mergeLogged()
		case <-ctx.Done():
			s.drain()
			d.mergeLogged()
			return nil
		case <-s.closing:
			s.drain()
			d.mergeLogged()
			return nil
		}
	}
}

// restAfter is how long the writer waits after a commit with nothing
// more to do before it lets go of its group and its queue's chunks.
const restAfter = time.Second

// settleAfter is how long after its last commit of changes the writer
// commits once more, empty: a little over the data window.
func settleAfter(window time.Duration) time.Duration { return window + window/16 }

// settled commits nothing but the run marker, once the data window has
// passed since the last commit of changes: a later crash or power cut
// then leaves no record suspect, where the window before the last commit
// would hold the last records hashed, however long ago (shutdown.go). It
// does so only when every mount the window's records were hashed on is
// still up and forces its writes to disk (kept.go): time alone does not
// bring a write to a disk pulled out. Records from before this run are
// not in its list; an unclean end or a restart before it left them
// suspect already. An idle writer does it once, and then sleeps.
func (s *Store) settled() {
	from := s.run.LastCommit.UnixNano() - int64(s.run.Window)
	if m := s.uses.keptFrom(from, keptMount); m != nil {
		s.log.Info("store: a file system the last records were hashed on did not keep its writes; they stay suspect",
			"mount", m.Point)
		return
	}
	if err := s.update(func(*wtx) error { return nil }); err != nil {
		s.log.Debug("store: cannot mark the last records settled", "err", err)
	}
}

// rest lets go of the writer's group, its transactions' buffers and the
// queue's chunks, unless changes wait. The writer lock, which Run holds,
// keeps every write transaction away meanwhile.
func (s *Store) rest() {
	if s.q.len() == 0 {
		s.q.release()
		s.batch = nil
		s.txBufs = [3]keyBuf{}
	}
}

// mergeLogged merges what is pending, logging a failure: the entries stay
// pending, and the writer tries again after a delay that doubles with each
// failure up to a minute (a full disk, a damaged index), logging once.
func (d *deferred) mergeLogged() {
	err := d.merge()
	if err == nil {
		d.mergeFails, d.mergeAfter = 0, time.Time{}
		return
	}
	if d.mergeFails == 0 {
		d.log.Warn("store: cannot merge the digest index yet", "err", err, "pending", d.pending.Load())
	}
	d.mergeFails++
	d.mergeAfter = time.Now().Add(min(mergeIdle<<min(d.mergeFails, 10), time.Minute))
}

// SetBulk tells the writer how to know that its caller works in bulk (an
// indexer's first scan, say): while bulk reports true, a group waits for
// its next change up to Options.BulkIdle instead of MaxIdle. The changes
// of a first scan read from disk come a few at a time, each after its
// file's read, often more than a millisecond apart: cut at MaxIdle, a
// third of a cold scan's changes went into groups too small to defer
// their digest entries (deferMinGroup), each written into a random leaf
// of the digest index, and the scan made twice the commits of a warm one.
// A group holding a change its caller waits for (Put, SubmitAll, a
// fenced drop: a scan's start, a lookup's hash) goes at MaxIdle still;
// the changes submitted alone (Submit) wait BulkIdle more at most. bulk is
// called once a group, from the writer; it must be cheap and safe to call
// from any goroutine. Nil: never bulk.
func (s *Store) SetBulk(bulk func() bool) {
	if bulk == nil {
		s.bulk.Store(nil)
		return
	}
	s.bulk.Store(&bulk)
}

// groupIdle is how long a group waits for its next change.
func (s *Store) groupIdle() time.Duration {
	if b := s.bulk.Load(); b != nil && (*b)() {
		return s.opts.BulkIdle
	}
	return s.opts.MaxIdle
}

// collect gathers a group: first, then whatever arrives until MaxDelay has
// passed, the group's cap is reached (MaxBatch, less while commits touch
// many nodes: group.go), or no change arrived for MaxIdle (BulkIdle while
// the caller works in bulk: SetBulk).
func (s *Store) collect(ctx context.Context, first item) []item {
	clear(s.batch) // drop the last group's references
	batch := append(s.batch[:0], first)
	defer func() { s.batch = batch }()
	deadline := time.NewTimer(s.opts.MaxDelay)
	defer deadline.Stop()
	wait := s.groupIdle()
	if first.waited {
		wait = s.opts.MaxIdle
	}
	idle := time.NewTimer(wait)
	defer idle.Stop()
	for len(batch) < s.group.n {
		if it, ok := s.q.pop(); ok {
			batch = append(batch, it)
			if it.waited {
				wait = s.opts.MaxIdle
			}
			continue
		}
		idle.Reset(wait)
		select {
		case <-s.q.ready: // the loop takes it
		case <-idle.C:
			return batch
		case <-deadline.C:
			return batch
		case <-ctx.Done():
			return batch
		case <-s.closing:
			return batch
		}
	}
	return batch
}

// drain commits everything queued now.
func (s *Store) drain() {
	for {
		batch := make([]item, 0, 64)
	fill:
		for len(batch) < s.group.n {
			it, ok := s.q.pop()
			if !ok {
				break fill
			}
			batch = append(batch, it)
		}
		if len(batch) == 0 {
			return
		}
		s.commit(batch)
	}
}

// changeError is a change's own failure (e.g. rename of a missing path); it
// does not abort the other changes of its group.
type changeError struct{ err error }

func (e changeError) Error() string { return e.err.Error() }
func (e changeError) Unwrap() error { return e.err }

// commit applies a group in one transaction. If the transaction fails, each
// change is retried alone so that one bad change cannot sink the others.
// A group the file system has no room for is split in halves, so what
// fits is committed; a single change without room is held (nospace.go).
func (s *Store) commit(batch []item) {
	s.hold.inHand.Add(int64(len(batch)))
	s.nodes = 0
	s.deferred.deferring = len(batch) >= cmp.Or(s.opts.deferAt, deferMinGroup)
	s.fenceSet.beginGroup()
	s.commitGroup(batch)
	s.fenceSet.endGroup()
	s.deferred.deferring = false
	s.group.committed(len(batch), s.nodes)
}

// testHookApplied, set only by tests, runs on the writer after a group's
// changes are applied and before they commit.
var testHookApplied func()

func (s *Store) commitGroup(batch []item) {
	errs := make([]error, len(batch))
	err := s.whileNoSpace(len(batch), func() error {
		return s.update(func(w *wtx) error {
			for i := range batch {
				errs[i], batch[i].n = nil, 0
				w.tick()
				if err := apply(w, &batch[i]); err != nil {
					var ce changeError
					if !errors.As(err, &ce) {
						return err
					}
					errs[i] = ce.err
				}
			}
			st := w.tx.Stats()
			s.nodes = max(s.nodes, st.GetNodeCount())
			if testHookApplied != nil {
				testHookApplied()
			}
			return nil
		})
	})
	if errors.Is(err, ErrNoSpace) && len(batch) > 1 && !s.stopping() {
		half := len(batch) / 2
		s.commitGroup(batch[:half])
		s.commitGroup(batch[half:])
		return
	}
	if err != nil && len(batch) > 1 && !errors.Is(err, ErrNoSpace) {
		s.log.Warn("store: group commit failed, retrying changes one by one", "err", err, "changes", len(batch))
		for i := range batch {
			s.commitGroup(batch[i : i+1])
		}
		return
	}
	if err != nil {
		s.log.Error("store: commit failed", "err", err, "changes", len(batch))
	}
	for i := range batch {
		if err != nil {
			errs[i] = err
		} else if batch[i].removed != nil {
			batch[i].removed.Add(int64(batch[i].n))
		}
		batch[i].done(errs[i])
	}
	s.hold.inHand.Add(-int64(len(batch)))
}

// update runs fn in a write transaction and commits.
func (s *Store) update(fn func(w *wtx) error) (err error) {
	if err := s.dmg.get(); err != nil {
		return err // a damaged index is never written
	}
	defer func() { s.dmg.note(err) }()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: panic in write: %v", ErrCorrupt, s.path, r)
		}
	}()
	defer s.epoch.end()
	var delta, digested, runs, shelved int64
	var logged bool
	err = s.db.Update(func(tx *bolt.Tx) error {
		s.mapTrim.trim(tx)
		w, err := newWtx(tx, &s.epoch, &s.txBufs)
		if err != nil {
			return err
		}
		w.fences, w.surveys.floors, w.mapTrim, w.uses = &s.fenceSet, s.floors, s.mapTrim, &s.uses
		w.surveys.uses = &s.uses
		s.deferred.begin(w)
		defer func() {
			delta, digested, runs, shelved = w.runs.delta, w.c.Digested, int64(w.runs.pend.Sequence()), w.c.Shelved
		}()
		if w.log, err = s.openTxLog(tx); err != nil {
			return err
		}
		if w.feed, err = s.openFeedTx(tx); err != nil {
			return err
		}
		defer func() { logged = w.feed != nil && w.feed.logged }()
		if err := fn(w); err != nil {
			return err
		}
		if err := s.stampCommit(tx); err != nil {
			return err
		}
		return w.finish()
	})
	switch {
	case err == nil:
		s.deferred.committed(delta, digested, runs)
		s.shelved.Store(shelved)
		if logged {
			s.bell.ring()
		}
		return nil
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, bolterr.ErrMaxSizeReached):
		return fmt.Errorf("%w: %s: %v%s", ErrNoSpace, s.path, err, indexfile.Hint(err))
	case errors.Is(err, bolterr.ErrDatabaseNotOpen):
		return ErrClosed
	case errors.Is(err, ErrCorrupt):
		return fmt.Errorf("store: write %s: %w (run annexd check-db)", s.path, err)
	}
	return fmt.Errorf("store: write %s: %w", s.path, err)
}

func apply(w *wtx, it *item) error {
	c := &it.c
	if w.fences.active() {
		w.fences.touchChange(c)
	}
	if c.Fence != nil && !w.fences.admit(c.Fence, string(c.Path)) {
		if c.Op == OpDeleteIfOlder {
			return nil // a sweep's delete of a path touched since: the record stays
		}
		return changeError{&ConflictError{Path: c.Path, Found: true}}
	}
	if w.feed != nil {
		w.feed.finding = c.Finding
		defer func() { w.feed.finding = "" }()
	}
	var err error
	switch c.Op {
	case OpPut:
		if c.Shelve {
			err = w.putShelving(c.Path, &c.Record)
		} else {
			err = w.put(c.Path, &c.Record)
		}
	case OpUnshelve:
		if err = w.unshelve(c.Path, &c.Record, c.Gen, c.Shelve); errors.Is(err, ErrConflict) {
			return changeError{err}
		}
	case opUnshelf:
		err = w.dropShelved(c.Path)
	case OpDelete:
		_, err = w.remove(c.Path)
	case OpDeleteSubtree:
		var n int
		n, err = w.removeSubtree(c.Path, c.Keep)
		it.n = n
	case OpMove:
		var m Moved
		m, err = w.move(c.Path, c.NewPath)
		if it.moved != nil {
			*it.moved = m
		}
	case opAdopt:
		err = w.adopt(it.adopt)
	case OpMark:
		err = w.mark(c.Path, c.Gen)
	case OpDeleteIfOlder:
		var ok bool
		ok, err = w.removeIfOlder(c.Path, c.Gen)
		if ok {
			it.n = 1
		}
	case OpPutMeta:
		err = w.user.Put(c.Path, c.Value)
	case OpDeleteMeta:
		err = w.user.Delete(c.Path)
	case OpPutIf:
		if err = w.putIf(c.Path, &c.Record, &c.Expect); errors.Is(err, ErrConflict) {
			return changeError{err}
		}
	case opNextGen:
		*it.gen, err = w.nextGeneration()
	case opSurvey:
		if err = w.surveys.put(it.survey); errors.Is(err, ErrConflict) {
			return changeError{err}
		}
	}
	return err
}

// Close stops accepting changes, commits those queued (waiting for Run to
// finish if it is running) and closes the file.
func (s *Store) Close() error {
	s.once.Do(func() {
		close(s.closing)
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.writer.Lock()
		if !s.opts.ReadOnly {
			s.drain()
			s.deferred.mergeLogged()
			if err := s.endRun(); err != nil {
				s.log.Warn("store: cannot record the clean shutdown", "err", err)
			}
		}
		s.writer.Unlock()
		s.errOnce = s.db.Close()
		s.mapTrim.close()
	})
	return s.errOnce
}
