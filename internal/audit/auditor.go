package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annexd/annexd/store"
)

// Options configure an Auditor: the [audit] section and the parts it reads.
type Options struct {
	Config
	// Indexer takes the files found modified or missing, says which paths
	// it holds, and whether it has work. Nil: none of that.
	Indexer Indexer
	// Ledger tells of writes stat does not show. Nil: stat alone.
	Ledger Ledger
	// SyncWrites returns once Ledger holds every write made before the
	// call (watcher.Watcher.Sync), so a file is not judged changed without
	// a trace while the event of a write to it is still unread. Nil:
	// nothing to wait for.
	SyncWrites func(ctx context.Context) error
	// Crashes tells of unclean shutdowns. Nil: none known, so a lost write
	// is reported corrupt.
	Crashes Crashes
	// Logger; default discards.
	Logger *slog.Logger
	// ProcDir and SysDir are "/proc" and "/sys"; tests lay out their own.
	ProcDir, SysDir string
	// OnRun is called as each run begins to read, and as it reads again
	// after waiting at a gate; nil: nothing. It must not block.
	OnRun func()
	// OnPass is called once a pass has completed and its entries are
	// pruned; nil: nothing. It must not block (heal starts from it).
	OnPass func()
	// Roots are the directories whose records the coverage counts;
	// records left outside them by runs with other roots are not. Nil:
	// every record.
	Roots [][]byte
}

// Auditor verifies the index against the files on a schedule. Create it
// with New, call Run once; the other methods serve the API while it runs.
// It is the front door: it wires its parts (each in a file of its own)
// and runs the scheduler's loop (run.go).
type Auditor struct {
	st   Store
	o    Options
	log  *slog.Logger
	g    *gates    // whether a run may read now (gates.go)
	note *notifier // runs on_problem (notify.go)

	book               // the entries and the findings (book.go); its own lock
	*checker           // reads a file and classifies it (check.go)
	recorder *recorder // acts on a verdict (act.go)
	stamps             // hands out VerifiedAt times in order (passes.go)
	schedule           // when the next scheduled run starts (schedule.go)

	// loaded is closed once Run has read the saved state (or failed to).
	loaded     chan struct{}
	loadedOnce sync.Once

	// mu guards the parts below, and the counts of the runs.
	mu       sync.Mutex
	started  bool
	stopped  bool
	runs     // the runs asked for, in progress and ended (runs.go)
	passes   // the state saved, the pass's counts (passes.go)
	tally    // the counts since the start (tally.go)
	coverage // the coverage and the findings that stand, as last counted (coverage.go)
	// inReads adds up the time paced runs' readers spent in read calls
	// (pacer.read): the audit's own waits for I/O.
	inReads atomic.Int64
}

// New makes an Auditor of the index st, computing digests with dg.
func New(st Store, dg Digester, o Options) (*Auditor, error) {
	if o.ProcDir == "" {
		o.ProcDir = "/proc"
	}
	if o.SysDir == "" {
		o.SysDir = "/sys"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Fill()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	a := &Auditor{st: st, o: o, log: o.Logger, schedule: newSchedule(&o.Config), loaded: make(chan struct{}),
		passes: passes{passCounts: map[Class]int64{}, skip: map[string]Class{}}}
	a.book = newBook(st, a.log, func(from, to string) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.moveSkip(from, to)
	})
	a.coverage = coverage{st: st, roots: o.Roots, every: o.Every, log: a.log, book: &a.book, mu: &a.mu}
	if o.Indexer != nil {
		a.coverage.bulk = o.Indexer.Bulk
	}
	a.checker = &checker{o: &a.o, st: st, dg: dg, book: &a.book}
	ownIO := func() time.Duration { return time.Duration(a.inReads.Load()) } // the readers' time in read calls
	a.g = newGates(o.Indexer, &o.Config, o.ProcDir, o.SysDir, ownIO)
	a.note = newNotifier(o.OnProblem, o.OnProblemEvery, a.log)
	a.note.keep, a.note.load = untoldIn(st, a.log)
	a.recorder = &recorder{st: st, o: &a.o, log: a.log, note: a.note, book: &a.book, stamps: &a.stamps, mu: &a.mu,
		passes: &a.passes, tally: &a.tally}
	return a, nil
}

// StartOptions say how a run started by hand goes.
type StartOptions struct {
	// Paths narrow the run to the records at or below them; none: the
	// whole index, going on with the pass in progress or beginning one.
	Paths [][]byte
	// TimeLimit ends the run after this long; 0: none.
	TimeLimit time.Duration
	// FullSpeed reads with every CPU, without the rate cap and the gates.
	FullSpeed bool
}

// Start begins a run now, ending the one in progress, and returns its id.
// A paused audit is resumed.
func (a *Auditor) Start(ctx context.Context, o StartOptions) (uint64, error) {
	paths := make([][]byte, 0, len(o.Paths))
	for _, p := range o.Paths {
		if len(p) == 0 || p[0] != '/' {
			return 0, fmt.Errorf("%w: %q is not absolute", ErrPath, p)
		}
		paths = append(paths, []byte(filepath.Clean(string(p))))
	}
	if err := a.ready(ctx); err != nil {
		return 0, err
	}
	if err := checkIndexed(ctx, a.st, paths); err != nil {
		return 0, err
	}
	o.Paths = paths
	a.mu.Lock()
	if !a.started || a.stopped {
		a.mu.Unlock()
		return 0, ErrStopped
	}
	r := a.newRun(o, true)
	a.dropPending(StopSuperseded)
	a.pending = r
	a.state.Paused = false
	if a.run != nil {
		a.run.stop(errSuperseded)
	}
	a.mu.Unlock()
	// The id is saved before it is handed out: a restarted daemon never
	// gives it to another run, so a client waiting on it cannot mistake one.
	if err := a.saveState(ctx); err != nil {
		return 0, err
	}
	a.poke()
	return r.id, nil
}

// ready waits until Run has read the saved state, so that what the caller
// changes now is not overwritten by it. A caller before Run waits for it.
func (a *Auditor) ready(ctx context.Context) error {
	select {
	case <-a.loaded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkIndexed returns ErrNotIndexed for the first path with no record at
// or below it: a run of it would check nothing and report all good.
func checkIndexed(ctx context.Context, st Store, paths [][]byte) error {
	for _, p := range paths {
		found := false
		err := st.Subtree(ctx, p, func([]byte, store.Record) error {
			found = true
			return store.ErrStop
		})
		if err != nil && !errors.Is(err, store.ErrStop) {
			return err
		}
		if !found {
			return fmt.Errorf("%w %s", ErrNotIndexed, p)
		}
	}
	return nil
}

// Pause stops the run in progress and keeps the audit from starting
// another until Resume or Start, across restarts.
func (a *Auditor) Pause(ctx context.Context) error {
	if err := a.ready(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	a.state.Paused = true
	a.dropPending(StopPaused)
	if a.run != nil {
		a.run.stop(errPaused)
	}
	a.mu.Unlock()
	a.poke()
	return a.saveState(ctx)
}

// Resume lets scheduled runs start again.
func (a *Auditor) Resume(ctx context.Context) error {
	if err := a.ready(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	a.state.Paused = false
	a.mu.Unlock()
	a.poke()
	return a.saveState(ctx)
}

// WaitRun waits until run id has ended and returns its summary.
func (a *Auditor) WaitRun(ctx context.Context, id uint64) (RunSummary, error) {
	a.mu.Lock()
	r := a.findRun(id)
	a.mu.Unlock()
	if r == nil {
		return RunSummary{}, fmt.Errorf("%w: %d", ErrUnknownRun, id)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return RunSummary{}, ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return r.summary(), nil
}

// Summary returns the summary of run id, whether it has ended or not.
func (a *Auditor) Summary(id uint64) (RunSummary, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.findRun(id)
	if r == nil {
		return RunSummary{}, fmt.Errorf("%w: %d", ErrUnknownRun, id)
	}
	return r.summary(), nil
}

// freshCounts counts the coverage again unless the last count is recent
// (minCoverageAge), and the problems whenever the index or the audit's
// book changed since their last count: what status shows is true when
// asked, or says how old it is (Coverage.At). A count made while the
// indexer worked in bulk stands no longer once the bulk work ended and
// the index changed, nor one that found no file: the first status after
// a scan counts what it wrote.
// A count that finds files where the scheduler found none wakes it, so
// that its plan follows.
func (a *Auditor) freshCounts(ctx context.Context) {
	a.mu.Lock()
	at, took, tx, before, counted, ptx := a.cover.At, a.coverTook, a.coverTx, a.cover.Total, a.countedAt, a.problemsTx
	inBulk := a.coverBulk
	a.mu.Unlock()
	committed, err := a.st.Committed()
	if counted != a.book.changes.Load() || err != nil || committed != ptx {
		// A finding filed or dropped, or a record written (an edit ends
		// a finding the book holds until it is pruned): counted at once.
		// It reads a record a finding, not the whole index.
		a.countProblems(ctx)
	}
	age := time.Since(at)
	stands := 10 * took
	bulk := a.coverage.bulk != nil && a.coverage.bulk()
	if bulk {
		stands = 60 * took
	}
	if committed != tx && (inBulk && !bulk || before == 0) {
		// Counted during bulk work that has ended since, or when there
		// was nothing to audit: neither is worth keeping once written to.
		stands = 0
	}
	if err == nil && committed == tx && age < minCoverageAge || age < stands {
		return
	}
	a.countCoverage(ctx)
	a.countProblems(ctx)
	a.mu.Lock()
	now := a.cover.Total
	a.mu.Unlock()
	if (before == 0) != (now == 0) {
		a.poke()
	}
}

// Status is what the audit is doing.
type Status struct {
	// State is "running", "waiting" (a gate is closed), "paused" (by the
	// user) or "idle" (until the next scheduled run).
	State string
	// Reason says why it waits, is paused or idle.
	Reason string
	// Run is the run in progress.
	Run *RunSummary
	// Rate is the run's reading rate in bytes a second.
	Rate float64
	// Pass is the pass in progress.
	Pass *PassStatus
	// Last is the last completed pass.
	Last *PassSummary
	// NextRun is when the next scheduled run starts, when known.
	NextRun  time.Time
	Coverage Coverage
	// Problems counts the findings that stand: the files Problems lists
	// (corrupt, unreadable, changed without a trace, or with a lost write).
	Problems int64
	// IOPriority says how the readers' idle I/O class fares on the disk.
	IOPriority string
	// Totals count the files of each class since the daemon started.
	Totals map[string]int64
	// BytesVerified and Transient since the daemon started.
	BytesVerified, Transient int64
	// CacheOnly counts the files verified since the daemon started whose
	// bytes came from the page cache only, by Source (never FromDevice);
	// CacheOnlyBytes their bytes. They are part of Totals["ok"].
	CacheOnly      map[string]int64
	CacheOnlyBytes int64
}

// PassStatus is the progress of the pass in progress.
type PassStatus struct {
	ID     uint64
	Began  time.Time
	Cutoff time.Time // the pass verifies what was last checked before this
	// Files and Bytes were in the pass when it began; Done and DoneBytes
	// are behind it.
	Files, Bytes    int64
	Done, DoneBytes int64
	Counts          map[string]int64
	// ETA is the time left at the current run's rate; 0 when unknown.
	ETA time.Duration
}

// Reading reports whether a run is in progress and not waiting at a gate.
func (a *Auditor) Reading() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.run != nil && a.run.gate == ""
}

// Status returns a snapshot, true when asked: the coverage and the
// problems are counted again unless the last count is recent (its time is
// in Coverage.At), the plan of the next run is made again, and a closed
// gate is looked at again.
func (a *Auditor) Status() Status {
	a.freshCounts(context.Background())
	gate := a.regate()
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	s := Status{Coverage: a.cover, Problems: a.problems,
		IOPriority: a.ioPriority(), Last: a.state.Last}
	a.tally.fill(&s)
	switch {
	case a.run != nil && a.run.gate != "" && gate != "":
		s.State, s.Reason = "waiting", gate
	case a.run != nil:
		s.State, s.Reason = "running", ""
	case a.state.Paused:
		s.State, s.Reason = "paused", "paused by the user"
	default:
		s.State = "idle"
		s.NextRun, s.Reason = a.plan(now, &a.state, &a.cover)
	}
	if a.run != nil {
		rs := a.run.summary()
		s.Run = &rs
		if el := time.Since(a.run.began).Seconds(); el > 0 && !a.run.began.IsZero() {
			s.Rate = float64(a.run.bytes) / el
		}
	}
	if p := a.state.Pass; p != nil {
		ps := &PassStatus{ID: p.ID, Began: time.Unix(0, p.Began), Cutoff: time.Unix(0, p.Cutoff),
			Files: p.Files, Bytes: p.Bytes, Done: p.OK, DoneBytes: p.OKBytes, Counts: map[string]int64{"ok": p.OK}}
		for c, n := range a.passCounts {
			ps.Counts[c.String()] = n
			ps.Done += n
		}
		if left := p.Bytes - ps.DoneBytes; left > 0 && s.Rate > 0 {
			ps.ETA = time.Duration(float64(left) / s.Rate * float64(time.Second))
		}
		s.Pass = ps
	}
	return s
}
