package indexer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
)

// job is one path to check.
type job struct {
	path    string
	scans   []*scan          // scans that saw the path and wait for it to settle
	attempt int              // retries so far after "changed while hashing"
	info    *fsstat.FileInfo // from the walk that queued it, saving an lstat; nil: stat it
	open    bool             // the walk did not stat it: open it, and take its identity from the descriptor
	noAdopt bool             // the index was empty when the walk started: no rename to find
	absent  bool             // the walk's check found no record, saving a look-up
	shelve  bool             // the record at the path is another disk's: shelve it when writing
	size    int64            // the file's size when its walk queued it (or its checker opened it), for its scans' progress
	entry   *pendingEntry    // the path's entry in the pipeline's set when enqueue made it; nil: look it up
}

// pipeline carries paths to the workers and their results to the store. A
// path is in it at most once, from enqueue until its write is durable: an
// event for a path already in it only asks for one more check afterwards.
type pipeline struct {
	st      *store.Store
	log     *slog.Logger
	m       *counters
	idle    *signal // told when the pipeline empties, and when it no longer is
	dirs    *dirFds // closed when the pipeline empties: an idle daemon holds no directory open
	walks   *walks  // whether a scan's walk runs (hintSettle)
	queue   chan job
	requeue requeue
	pend    *pendingSet
	writes  chan struct{} // semaphore: store writes in flight
	hinted  atomic.Bool   // the store was asked to settle since fewer paths than store.DeferredGroup were left
}

// pipeParts are what a pipeline is built from.
type pipeParts struct {
	st                    *store.Store
	log                   *slog.Logger
	m                     *counters
	idle                  *signal
	dirs                  *dirFds
	walks                 *walks
	maxPending, maxWrites int
}

func newPipeline(pp pipeParts) *pipeline {
	return &pipeline{st: pp.st, log: pp.log, m: pp.m, idle: pp.idle, dirs: pp.dirs, walks: pp.walks,
		queue:   make(chan job, pp.maxPending),
		requeue: requeue{signal: make(chan struct{}, 1)},
		pend:    newPendingSet(pp.idle.notify),
		writes:  make(chan struct{}, pp.maxWrites)}
}

// start runs n workers in g, each calling check for one job at a time until
// ctx ends.
func (p *pipeline) start(ctx context.Context, g *errgroup.Group, n int, check func(context.Context, job)) {
	for range n {
		g.Go(func() error {
			for ctx.Err() == nil {
				if j, ok := p.next(ctx); ok {
					check(ctx, j)
				}
			}
			return nil
		})
	}
}

// enqueue puts j in the pipeline unless its path is already there (then one
// more check is asked for, on behalf of sc if not nil). It blocks while the
// queue is full.
func (p *pipeline) enqueue(ctx context.Context, j job, sc *scan, size int64) {
	if j.entry = p.pend.addEntry(j.path, sc, size); j.entry == nil {
		if j.open && sc != nil {
			p.sizeFor(j.path, sc) // its own check will not size it for sc
		}
		return
	}
	if sc != nil {
		sc.wg.Add(1)
		j.scans, j.size = []*scan{sc}, size
	}
	select {
	case p.queue <- j:
	case <-ctx.Done():
		p.finish(j)
	}
}

// enqueueFirst puts j ahead of the queue unless its path is in the
// pipeline already, and reports whether it did. No scan waits for it: the
// walk that meets the path later checks it, and finds it settled.
func (p *pipeline) enqueueFirst(j job, size int64) bool {
	if j.entry = p.pend.addNew(j.path, size); j.entry == nil {
		return false
	}
	p.push(j)
	return true
}

// sizeFor counts the size of path, walked by sc without a stat, in what
// sc saw, from an lstat: the path was in the pipeline already, and the
// check that sc now waits for does not open it.
func (p *pipeline) sizeFor(path string, sc *scan) {
	if fi, err := fsstat.Lstat(path); err == nil && fi.IsRegular() {
		countSize(p.m, []*scan{sc}, fi.Size)
	}
}

// countSize counts size bytes of a file its walk did not stat where the
// walk would have: in the bytes seen, and in what each of scans saw.
func countSize(m *counters, scans []*scan, size int64) {
	m.bytesSeen.Add(size)
	for _, sc := range scans {
		sc.live.bytes.Add(size)
		sc.live.hashBytes.Add(size)
		sc.sized.Add(size)
	}
}

// enqueueRehash puts path in the pipeline to be hashed even if its
// record looks current; a path already in it gets one more check that
// hashes it.
func (p *pipeline) enqueueRehash(ctx context.Context, path string) {
	if !p.pend.addRehash(path) {
		return
	}
	select {
	case p.queue <- job{path: path}:
	case <-ctx.Done():
		p.finish(job{path: path})
	}
}

// requeue holds jobs put back by workers (retries, re-checks); a worker must
// never block on the bounded queue that workers drain.
type requeue struct {
	mu     sync.Mutex
	jobs   []job
	signal chan struct{}
}

// push puts a job that is in the pending set back in line.
func (p *pipeline) push(j job) {
	p.requeue.mu.Lock()
	p.requeue.jobs = append(p.requeue.jobs, j)
	p.requeue.mu.Unlock()
	select {
	case p.requeue.signal <- struct{}{}:
	default:
	}
}

// later pushes j after d, unless ctx ends first.
func (p *pipeline) later(ctx context.Context, d time.Duration, j job) {
	t := time.AfterFunc(d, func() { p.push(j) })
	context.AfterFunc(ctx, func() { t.Stop() })
}

func (p *pipeline) popRequeued() (job, bool) {
	p.requeue.mu.Lock()
	defer p.requeue.mu.Unlock()
	if len(p.requeue.jobs) == 0 {
		return job{}, false
	}
	j := p.requeue.jobs[0]
	p.requeue.jobs = p.requeue.jobs[1:]
	if len(p.requeue.jobs) > 0 {
		select {
		case p.requeue.signal <- struct{}{}:
		default:
		}
	}
	return j, true
}

func (p *pipeline) next(ctx context.Context) (job, bool) {
	if j, ok := p.popRequeued(); ok {
		return j, true
	}
	select {
	case j := <-p.queue:
		return j, true
	case <-p.requeue.signal:
		return p.popRequeued()
	case <-ctx.Done():
		return job{}, false
	}
}

// finish ends j: its scans are told, and the path leaves the pipeline unless
// another check was asked for meanwhile, which is then queued.
func (p *pipeline) finish(j job) {
	for _, sc := range j.scans {
		sc.live.settled.Add(j.size)
		sc.wg.Done()
	}
	again, scans, size, left := p.pend.release(j.path)
	if again {
		p.push(job{path: j.path, scans: scans, size: size})
	}
	if left == 0 {
		p.dirs.closeAll()
		p.idle.notify()
	}
	p.hintSettle(left)
}

// hintSettle asks the store to merge its pending digest entries
// (store.SettleSoon) once no walk runs and fewer paths are left in the
// pipeline than a group that defers entries holds: no later change adds
// a pending entry, so this merge is the scan's last, and it runs while
// the scan's last files, the large ones, are still being hashed. It asks
// once each time the pipeline falls below that size.
func (p *pipeline) hintSettle(left int) {
	if left >= store.DeferredGroup {
		p.hinted.Store(false)
		return
	}
	if !p.walks.walking() && !p.hinted.Swap(true) {
		p.st.SettleSoon()
	}
}

// write submits a change; j finishes when it is durable.
func (p *pipeline) write(j job, c store.Change) {
	p.writeThen(j, c, func() { p.finish(j) })
}

// writeHeld submits a change like write, but j finishes only once it is
// durable and the returned release was called too: what the checker does
// right after the submission (telling a finding, whose hearers submit
// changes that must come after it) is still the path's work, so no one
// waiting for the path to settle misses it.
func (p *pipeline) writeHeld(j job, c store.Change) (release func()) {
	var left atomic.Int32
	left.Store(2)
	release = func() {
		if left.Add(-1) == 0 {
			p.finish(j)
		}
	}
	p.writeThen(j, c, release)
	return release
}

// writeThen submits a change and calls then once it is durable, or failed.
func (p *pipeline) writeThen(j job, c store.Change, then func()) {
	p.writes <- struct{}{}
	p.st.Submit(c, func(err error) {
		<-p.writes
		if (c.Op == store.OpPutIf || c.Op == store.OpUnshelve) && errors.Is(err, store.ErrConflict) {
			err = nil // changed meanwhile: that change stands, and is checked in turn
		}
		if err != nil {
			p.m.errors.Add(1)
			p.log.Error("cannot write index", "path", j.path, "err", err)
		}
		then()
	})
}

// markSeen records that scan sc saw path, so its sweep keeps the record.
func (p *pipeline) markSeen(path string, sc *scan) {
	sc.wg.Add(1)
	p.writes <- struct{}{}
	p.st.Submit(store.Change{Op: store.OpMark, Path: []byte(path), Gen: sc.gen}, func(err error) {
		<-p.writes
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			sc.errs.Add(1)
			p.log.Error("cannot mark record", "path", path, "err", err)
		}
		sc.wg.Done()
	})
}

// drain waits until every submitted write is acknowledged, or grace ends.
func (p *pipeline) drain(grace time.Duration) {
	deadline := time.After(grace)
	for i := 0; i < cap(p.writes); i++ {
		select {
		case p.writes <- struct{}{}:
		case <-deadline:
			p.log.Warn("writes still in flight at shutdown", "count", cap(p.writes)-i)
			return
		}
	}
}
