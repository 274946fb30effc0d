package audit

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annexd/annexd/hasher/mbsha256"
	"github.com/annexd/annexd/store"
)

// Why a run ends early: the causes of its context.
var (
	errTimeLimit  = errors.New("time limit reached")
	errWindow     = errors.New("run window closed")
	errPaused     = errors.New("paused")
	errSuperseded = errors.New("another run was started")
)

// How a run ended (RunSummary.StoppedBy).
const (
	StopDone       = "done"
	StopTimeLimit  = "time_limit"
	StopWindow     = "window_closed"
	StopPaused     = "paused"
	StopSuperseded = "superseded"
	StopShutdown   = "shutdown"
	StopError      = "error"
)

// maxAttempts bounds how often one run meets a file it could not decide
// (busy in the indexer, a failure that may pass) before leaving it to the
// next pass.
const maxAttempts = 20

// retryDelay is the wait before a run looks again at the files it left.
const retryDelay = 2 * time.Second

// errorBackoff is the wait before a scheduled run that failed is tried
// again.
const errorBackoff = time.Minute

// run is one stretch of auditing, scheduled or started by hand.
type run struct {
	id     uint64
	o      StartOptions
	manual bool
	cutoff int64 // records checked before this are in the run
	pace   *pacer
	cancel context.CancelCauseFunc // nil until it begins; use stop
	cause  error                   // a stop asked for before it began
	done   chan struct{}
	began  time.Time

	inflight sync.WaitGroup // verifications submitted, not acknowledged
	gateMu   sync.Mutex     // one reader looks at the gates at a time
	gateOpen time.Time      // when they were last seen open
	regate   chan struct{}  // look at the gates again now (status saw them open)

	// guarded by Auditor.mu
	counts    [classEnd]int64
	bytes     int64
	transient int64
	// cacheOnly counts the files verified from the page cache only, by
	// source; cacheOnlyBytes their bytes.
	cacheOnly      [sourceEnd]int64
	cacheOnlyBytes int64
	gate           string // why it waits now
	attempts       map[string]int
	seen           map[string]bool     // paths decided in this run
	left           map[string]leftFile // paths given up on after their attempts
	ended          time.Time
	stopped        string
	err            error
}

// RunSummary describes a run.
type RunSummary struct {
	ID        uint64
	Manual    bool
	Paths     [][]byte
	FullSpeed bool
	TimeLimit time.Duration
	Began     time.Time
	Ended     time.Time // zero while it runs
	StoppedBy string    // a Stop* value once it ended
	Err       string
	Counts    map[string]int64 // files by class
	Bytes     int64            // bytes verified
	Transient int64            // files a second read proved ok
	// CacheOnly counts the files of Counts["ok"] whose bytes came from the
	// page cache only, not from a device, by Source (never FromDevice);
	// CacheOnlyBytes their bytes.
	CacheOnly      map[string]int64
	CacheOnlyBytes int64
	// Left counts the files the run gave up on: they stay due.
	Left Left
}

// Left counts files an audit left undecided: busy while it tried, or
// their file system away (Away of Files). They stay due for a later run.
type Left struct {
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
	Away  int64 `json:"away,omitempty"`
}

// leftFile is a file a run gave up on.
type leftFile struct {
	size int64
	away bool
}

// leftCount counts the files the run gave up on and did not decide after
// all. Called with Auditor.mu held.
func (r *run) leftCount() Left {
	var n Left
	for path, f := range r.left {
		if r.seen[path] {
			continue
		}
		n.Files++
		n.Bytes += f.size
		if f.away {
			n.Away++
		}
	}
	return n
}

// Found reports the findings that decide annexctl's exit status.
func (s RunSummary) Found(c Class) int64 { return s.Counts[c.String()] }

// newRun makes the next run; its id is kept in the state. Called with
// a.mu held.
func (a *Auditor) newRun(o StartOptions, manual bool) *run {
	r := a.open(o, manual)
	a.state.Runs = r.id
	return r
}

// stop ends the run for cause, or has it end as soon as it begins. Called
// with Auditor.mu held.
func (r *run) stop(cause error) {
	if r.cancel != nil {
		r.cancel(cause)
	} else if r.cause == nil {
		r.cause = cause
	}
}

// summary is called with Auditor.mu held.
func (r *run) summary() RunSummary {
	s := RunSummary{ID: r.id, Manual: r.manual, Paths: r.o.Paths, FullSpeed: r.o.FullSpeed, TimeLimit: r.o.TimeLimit,
		Began: r.began, Ended: r.ended, StoppedBy: r.stopped, Counts: map[string]int64{}, Bytes: r.bytes, Transient: r.transient}
	if r.err != nil {
		s.Err = r.err.Error()
	}
	for c := OK; c < classEnd; c++ {
		if r.counts[c] > 0 {
			s.Counts[c.String()] = r.counts[c]
		}
	}
	s.CacheOnly, s.CacheOnlyBytes = cacheOnlyMap(&r.cacheOnly), r.cacheOnlyBytes
	s.Left = r.leftCount()
	return s
}

// cacheOnlyMap turns counts by source into a map without FromDevice,
// nil when all are zero.
func cacheOnlyMap(n *[sourceEnd]int64) map[string]int64 {
	var m map[string]int64
	for s := FromDevice + 1; s < sourceEnd; s++ {
		if n[s] > 0 {
			if m == nil {
				m = map[string]int64{}
			}
			m[s.String()] = n[s]
		}
	}
	return m
}

// Run audits on schedule, and when asked to by Start, until ctx ends.
func (a *Auditor) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return errors.New("audit: Run called twice")
	}
	a.started = true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.stopped = true
		a.dropPending(StopShutdown)
		a.mu.Unlock()
	}()
	err := a.load(ctx)
	a.loadedOnce.Do(func() { close(a.loaded) })
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.note.run(ctx) }()
	defer wg.Wait()
	a.refreshCoverage(ctx)
	for {
		r, err := a.next(ctx)
		if err != nil {
			return nil
		}
		a.execute(ctx, r)
		a.refreshCoverage(ctx)
	}
}

// next waits for the next run: one asked for by Start, or the scheduled
// one, which starts after a random jitter.
func (a *Auditor) next(ctx context.Context) (*run, error) {
	jitterDone := false
	for {
		a.mu.Lock()
		if r := a.pending; r != nil {
			a.pending, a.run = nil, r
			a.mu.Unlock()
			return r, nil
		}
		byCoverage := a.state.Last == nil && a.state.Pass == nil
		a.mu.Unlock()
		if byCoverage {
			// Before any pass the plan follows the coverage (due): count
			// it again, as the first scan may have filled the index.
			a.freshCounts(ctx)
		}
		a.mu.Lock()
		at, why := a.scheduled(time.Now(), &a.state, &a.cover)
		a.waiting, a.nextAt = why, at
		a.mu.Unlock()
		var timer *time.Timer
		if !at.IsZero() {
			wait := time.Until(at)
			if wait <= 0 && !jitterDone && a.jitter > 0 {
				jitterDone = true
				wait = rand.N(a.jitter)
				a.mu.Lock()
				a.nextAt = time.Now().Add(wait)
				a.mu.Unlock()
			}
			if wait <= 0 {
				a.mu.Lock()
				r := a.newRun(StartOptions{TimeLimit: a.o.TimeLimit}, false)
				a.run = r
				a.mu.Unlock()
				return r, nil
			}
			timer = time.NewTimer(wait)
		}
		err := a.idle(ctx, timer, &jitterDone)
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return nil, err
		}
	}
}

// execute carries out run r until it is done or stopped.
func (a *Auditor) execute(ctx context.Context, r *run) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	now := time.Now()
	a.mu.Lock()
	r.began, r.cancel = now, cancel
	if r.cause != nil {
		cancel(r.cause)
	}
	a.waiting, a.nextAt = "", time.Time{}
	a.mu.Unlock()
	if a.o.OnRun != nil {
		a.o.OnRun()
	}
	if r.o.TimeLimit > 0 {
		t := time.AfterFunc(r.o.TimeLimit, func() { cancel(errTimeLimit) })
		defer t.Stop()
	}
	if !r.manual {
		if end := closesAt(a.ws, now); !end.IsZero() {
			t := time.AfterFunc(time.Until(end), func() { cancel(errWindow) })
			defer t.Stop()
		}
	}
	if !r.o.FullSpeed {
		if r.pace = newPacer(a.o.MaxRate); r.pace == nil {
			r.pace = &pacer{} // no cap; it still counts the time in reads
		}
		r.pace.inReads = &a.inReads
	}
	stopCheckpoints := a.checkpoints(rctx)
	err := a.work(rctx, r)
	stopCheckpoints()
	a.finish(context.WithoutCancel(ctx), r, err, context.Cause(rctx))
}

// checkpoints saves the state every checkpointEvery until stopped.
func (a *Auditor) checkpoints(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(checkpointEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if err := a.saveState(ctx); err != nil {
					a.log.Warn("cannot save the audit's checkpoint", "err", err)
				}
			case <-done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// work goes over the run's records in rounds: each round reads what is
// left; a round that finds nothing left ends the run.
func (a *Auditor) work(ctx context.Context, r *run) error {
	if len(r.o.Paths) == 0 {
		if err := a.beginPass(ctx); err != nil {
			return err
		}
		a.mu.Lock()
		r.cutoff = a.state.Pass.Cutoff
		a.mu.Unlock()
	} else {
		r.cutoff = r.began.UnixNano()
	}
	for {
		sent, undecided, err := a.round(ctx, r)
		if err != nil {
			return err
		}
		if sent == 0 {
			return nil
		}
		if sent == undecided {
			t := time.NewTimer(retryDelay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
	}
}

// round hands the records still to read to the workers and waits until
// they are decided and their writes acknowledged. It returns how many it
// handed out and how many of those were left undecided.
func (a *Auditor) round(ctx context.Context, r *run) (sent, undecided int64, err error) {
	workers := a.o.Workers
	var lanes *mbsha256.Lanes
	if r.o.FullSpeed {
		workers = runtime.GOMAXPROCS(0)
		if lanes = a.newLanes(); lanes != nil {
			defer lanes.Close() // after the workers, which end every stream
			workers = max(workers, laneReaders(lanes.Width()))
			a.log.Info("audit: hashing large SHA-256 files in the lanes", "kernel", lanes.Kernel(), "readers", workers)
		}
	}
	chunk := chunkFor(workers, readerBufs)
	if lanes != nil {
		chunk = chunkFor(workers, laneBufs)
	}
	jobs := make(chan store.Due)
	var left atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.worker(ctx, r, lanes, chunk, jobs, &left)
		}()
	}
	err = a.source(ctx, r, func(d store.Due) error {
		if a.skipped(r, string(d.Path)) {
			return nil
		}
		if err := a.waitGates(ctx, r, workers); err != nil {
			return err
		}
		select {
		case jobs <- d:
			sent++
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	close(jobs)
	wg.Wait()
	r.inflight.Wait()
	if err == nil {
		err = ctx.Err()
	}
	return sent, left.Load(), err
}

// laneReaders is how many readers a full-speed run has with lanes of the
// given width: a reader a lane.
func laneReaders(width int) int { return width }

// newLanes returns the multi-buffer lanes of the Digester for a full-speed
// run, nil when it has none.
func (a *Auditor) newLanes() *mbsha256.Lanes {
	if l, ok := a.dg.(interface{ StreamLanes() *mbsha256.Lanes }); ok {
		return l.StreamLanes()
	}
	return nil
}

// source calls fn for the run's records still to read: those checked
// before the run's cutoff, in the whole index least recently checked
// first, or below each of the run's paths.
func (a *Auditor) source(ctx context.Context, r *run, fn func(store.Due) error) error {
	if len(r.o.Paths) == 0 {
		return a.st.ByChecked(ctx, nil, r.cutoff, fn)
	}
	for _, p := range r.o.Paths {
		err := a.st.Subtree(ctx, p, func(path []byte, rec store.Record) error {
			if !rec.Audited() || rec.Checked() >= r.cutoff {
				return nil
			}
			return fn(store.Due{Path: path, Record: rec})
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// skipped reports a path this run or the pass has decided, or left after
// too many attempts.
func (a *Auditor) skipped(r *run, path string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.seen[path] || r.attempts[path] >= maxAttempts {
		return true
	}
	_, decided := a.skip[path]
	return len(r.o.Paths) == 0 && decided
}

// gateCache is how long an open gate is taken as open: the gates read
// files in /proc and /sys, too costly for every small file.
const gateCache = time.Second

// waitGates blocks while a gate is closed, saying why in the status. A run
// at full speed passes them all.
func (a *Auditor) waitGates(ctx context.Context, r *run, workers int) error {
	if r.o.FullSpeed {
		return nil
	}
	r.gateMu.Lock()
	defer r.gateMu.Unlock()
	if time.Since(r.gateOpen) < gateCache {
		return nil
	}
	for {
		why := a.g.closed(workers)
		a.mu.Lock()
		if why != "" && r.gate == "" {
			a.log.Info("audit paused", "why", why)
		}
		resumed := why == "" && r.gate != ""
		if resumed {
			a.log.Info("audit resumed")
		}
		r.gate = why
		a.mu.Unlock()
		if why == "" {
			r.gateOpen = time.Now()
			if resumed && a.o.OnRun != nil {
				a.o.OnRun()
			}
			return nil
		}
		t := time.NewTimer(a.o.GatePoll)
		select {
		case <-t.C:
		case <-r.regate:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		workers = 0 // paused, the readers no longer count in the load
	}
}

// regate looks at the gates again while the run in progress waits at
// one, so that status says why it waits now, not at its last look. When
// they are open, the run is told to look again at once. It returns why the
// run waits now, "" when it does not.
func (a *Auditor) regate() string {
	a.mu.Lock()
	r := a.run
	waiting := r != nil && r.gate != ""
	a.mu.Unlock()
	if !waiting {
		return ""
	}
	why := a.g.closed(0)
	if why == "" {
		select {
		case r.regate <- struct{}{}:
		default:
		}
	}
	return why
}

// finish records how r ended, completes its pass when it read all of it,
// plans the next scheduled run and saves the state.
func (a *Auditor) finish(ctx context.Context, r *run, err, cause error) {
	stopped := StopDone
	switch {
	case err == nil:
	case errors.Is(cause, errTimeLimit):
		stopped = StopTimeLimit
	case errors.Is(cause, errWindow):
		stopped = StopWindow
	case errors.Is(cause, errPaused):
		stopped = StopPaused
	case errors.Is(cause, errSuperseded):
		stopped = StopSuperseded
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		stopped = StopShutdown
	default:
		stopped = StopError
		a.log.Error("audit run failed", "run", r.id, "err", err)
	}
	now := time.Now()
	a.mu.Lock()
	r.ended, r.stopped, r.gate = now, stopped, ""
	if stopped == StopError {
		r.err = err
	}
	switch {
	case r.manual:
	case stopped == StopTimeLimit || stopped == StopWindow:
		a.state.NextRun = a.nextRunAfter(now, r.began).UnixNano()
	case stopped == StopError:
		a.state.NextRun = now.Add(errorBackoff).UnixNano()
	}
	complete := stopped == StopDone && len(r.o.Paths) == 0 && a.state.Pass != nil
	left := r.leftCount()
	a.mu.Unlock()
	if complete {
		a.completePass(ctx, left)
	}
	if err := a.saveState(ctx); err != nil {
		a.log.Warn("cannot save the audit's state", "err", err)
	}
	a.mu.Lock()
	a.run = nil
	a.remember(r)
	s := r.summary()
	a.mu.Unlock()
	close(r.done)
	a.log.Info("audit run ended", "run", r.id, "stopped_by", stopped, "files", s.Counts, "bytes", s.Bytes,
		"took", now.Sub(r.began).Round(time.Millisecond))
	if len(s.CacheOnly) > 0 {
		a.log.Warn("audit verified files from the page cache only: their device could not be read", "run", r.id,
			"files", s.CacheOnly, "bytes", s.CacheOnlyBytes)
	}
}

// beginPass begins a pass when none is in progress: it covers every record
// checked before now.
func (a *Auditor) beginPass(ctx context.Context) error {
	a.mu.Lock()
	if a.state.Pass != nil {
		a.mu.Unlock()
		return nil
	}
	a.mu.Unlock()
	now := time.Now().UnixNano()
	n, err := a.st.CountChecked(ctx, now)
	if err != nil {
		return err
	}
	a.notBefore(now)
	a.mu.Lock()
	a.state.Passes++
	a.state.Pass = &passState{ID: a.state.Passes, Cutoff: now, Began: now, Files: n.Files, Bytes: n.Bytes, At: now}
	a.state.NextRun = 0
	clear(a.passCounts)
	clear(a.skip)
	id := a.state.Pass.ID
	a.mu.Unlock()
	a.log.Info("audit pass begins", "pass", id, "files", n.Files, "bytes", n.Bytes)
	return a.saveState(ctx)
}

// completePass ends the pass in progress: its summary becomes the last
// pass's, and the entries that only served it go. left are the files its
// last run gave up on: every file an earlier run of the pass left was
// due again in the last.
func (a *Auditor) completePass(ctx context.Context, left Left) {
	a.countCoverage(ctx)
	a.mu.Lock()
	p, cv := a.state.Pass, a.cover
	s := &PassSummary{ID: p.ID, Began: p.Began, Ended: time.Now().UnixNano(), Cutoff: p.Cutoff, Files: p.Files, Bytes: p.Bytes,
		Counts: map[string]int64{OK.String(): p.OK}, OKBytes: p.OKBytes}
	if left.Files > 0 {
		s.Left = &left
	}
	if cv.At.UnixNano() >= p.Began { // not a count from before the pass, when this one failed
		s.Cover = &PassCoverage{Every: int64(cv.Every), Files: cv.Files, Bytes: cv.Bytes, Total: cv.Total, TotalBytes: cv.TotalBytes}
	}
	for c, n := range a.passCounts {
		s.Counts[c.String()] = n
	}
	s.Unread = unread(s)
	prev := a.state.Last
	a.state.Last, a.state.Pass, a.state.NextRun = s, nil, 0
	clear(a.passCounts)
	clear(a.skip)
	a.mu.Unlock()
	if err := a.recordPass(s, prev); err != nil {
		a.log.Warn("cannot add the pass to the audit's history", "err", err)
	}
	if err := a.saveState(ctx); err != nil {
		a.log.Warn("cannot save the audit's state", "err", err)
	}
	a.log.Info("audit pass complete", "pass", s.ID, "files", s.Counts, "left", left.Files, "left_away", left.Away,
		"took", time.Duration(s.Ended-s.Began).Round(time.Second))
	if err := a.pruneEntries(ctx); err != nil {
		a.log.Warn("cannot drop the pass's entries", "err", err)
	}
	if a.o.OnPass != nil {
		a.o.OnPass()
	}
}
