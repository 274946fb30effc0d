package indexer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
	"github.com/annexd/annexd/watcher"
)

// Errors returned by the Indexer.
var (
	// ErrOutsideRoots: a path that is not under any root.
	ErrOutsideRoots = errors.New("indexer: path is not under a watched root")
	// ErrStopped: the indexer is not running (not started yet, or shut down).
	ErrStopped = errors.New("indexer: not running")
)

// Hasher is what the indexer needs of the hasher: the digest of the file at
// path, whose identity before is an lstat the indexer took, and that the
// hasher checks again after opening and after reading (hasher.HashStat);
// or of a file the indexer opened instead of stat'ing it (hasher.HashOpen,
// which takes the file over).
type Hasher interface {
	HashStat(ctx context.Context, path string, b key.Backend, before fsstat.FileInfo) (hasher.Result, error)
	HashOpen(ctx context.Context, f *hasher.File, b key.Backend) (hasher.Result, error)
}

// Ledger is what the indexer needs of the write ledger: whether the file
// at path, or inode (dev, ino) under any name, was written at or after
// sinceNs (Unix nanoseconds), may have been, or was not. The rule it
// serves is in internal/ledger.
type Ledger interface {
	Since(path string, dev, ino uint64, sinceNs int64) ledger.Answer
}

// Watches is what the indexer needs of the watcher (*watcher.Watcher)
// while it sets up its watches: the daemon's first scan starts beside
// that set-up, and the ledger hears of writes only from the events the
// watcher reads.
type Watches interface {
	// WaitWatched returns once dir is watched, or the set-up gave up on
	// it. A walk calls it before it reads each directory
	// (walker.Options.BeforeDir), so a change made after the read is an
	// event.
	WaitWatched(ctx context.Context, dir string) error
	// CatchingUp reports whether writes may have happened that Ledger was
	// not told of yet: the watcher reads no event while it sets up its
	// watches. While it does, a file whose ctime is newer than the
	// indexer is not trusted on the ledger's word: renamed, it is hashed
	// instead of taking over its old record, and other bytes under its
	// moved ctime are judged once the watcher has caught up.
	CatchingUp() bool
	// Sync returns once Ledger holds every write made before the call. It
	// is called before other bytes under a moved ctime are judged changed
	// without a trace, so a write whose event is not read yet is not
	// missed.
	Sync(ctx context.Context) error
}

// watchFuncs are w's methods, or nils without a watcher: then a walk waits
// for no directory, no write is unread and the ledger is never synced.
func watchFuncs(w Watches) (before func(context.Context, string) error, unread func() bool, sync func(context.Context) error) {
	if w == nil {
		return nil, nil, nil
	}
	return w.WaitWatched, w.CatchingUp, w.Sync
}

// noLedger knows of no write: writes are known from stat alone.
type noLedger struct{}

func (noLedger) Since(string, uint64, uint64, int64) ledger.Answer { return ledger.NotWritten }

// Options configure an Indexer. Zero fields get defaults.
type Options struct {
	// Roots are the absolute directories whose records the indexer keeps.
	Roots []string
	// Backend is the backend of new digests; default key.Default.
	Backend key.Backend
	// Workers is how many paths are checked and hashed at once; default
	// 2 × GOMAXPROCS.
	Workers int
	// MaxPending bounds the queue of paths waiting for a worker; default 4096.
	MaxPending int
	// MaxWrites bounds the store writes in flight; default 8192.
	MaxWrites int
	// WalkWorkers is the number of directory readers of a walk; default 2.
	WalkWorkers int
	// Watches is the watcher's set-up of its watches, which the first
	// scan starts beside; nil: no watcher (Watches).
	Watches Watches
	// Ignore holds gitignore-style patterns, matched relative to each root,
	// of paths never indexed (the caller includes ignore.Defaults() if it
	// wants them).
	Ignore []string
	// Exclude are absolute paths never indexed, with everything under them
	// (the index file itself, for example).
	Exclude []string
	// RemoveDelay is how long a path reported removed waits before its
	// records are dropped; default 2 s.
	RemoveDelay time.Duration
	// OnDemandMax is the largest file Lookup hashes itself when it is not
	// told to wait; default 256 MiB.
	OnDemandMax int64
	// MaxRetries bounds the retries of a file that keeps changing while it
	// is hashed; default 12 (about 10 minutes of backoff).
	MaxRetries int
	// Ledger tells of writes no stat field shows; nil knows of none.
	Ledger Ledger
	// OnFinding hears of each file whose bytes changed with no witness of
	// a write: a lost write, corrupt or changed without a trace (Finding).
	// The record is submitted first. It runs on a worker and must not
	// block; nil: findings are only logged.
	OnFinding FindingFunc
	// OneFileSystem keeps walks to each root's file system, as find -xdev
	// (walker.Options.OneFileSystem).
	OneFileSystem bool
	// Logger; default discards.
	Logger *slog.Logger
}

func (o *Options) fill() {
	if o.Backend == key.Unknown {
		o.Backend = key.Default
	}
	if o.Workers <= 0 {
		o.Workers = 2 * runtime.GOMAXPROCS(0)
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 4096
	}
	if o.MaxWrites <= 0 {
		o.MaxWrites = 8192
	}
	if o.WalkWorkers <= 0 {
		o.WalkWorkers = 2
	}
	if o.RemoveDelay <= 0 {
		o.RemoveDelay = 2 * time.Second
	}
	if o.OnDemandMax <= 0 {
		o.OnDemandMax = 256 << 20
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = 12
	}
	if o.Ledger == nil {
		o.Ledger = noLedger{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Indexer keeps the store's records true. Create it with New, call Run once,
// and feed it with Follow, or with Changed, Removed, Moved and Rescan.
//
// Its parts each do one job: the pipeline queues paths and writes results,
// the checker decides what each path needs, the scanner walks and sweeps,
// the renamer gives renamed files and hard links their records, and the
// feed hands the watcher's events over.
type Indexer struct {
	opt   Options
	st    *store.Store
	h     Hasher
	log   *slog.Logger
	paths *pathRules
	ticks *ticks
	fsys  *fileSystems
	m     *counters
	idle  *signal // told when work begins or a part's work ends (WorkChanged)

	pipe     *pipeline
	check    *checker
	scans    *scanner
	moves    *renamer
	removals *removals
	feed     *feed
	// displaced keeps flagged records whose paths other inodes took
	// (displaced.go).
	displaced *displaced
	onDemand  chan struct{} // semaphore: hashes run by Lookup
	rootAway  awayCache     // RootAway's looks for records

	running   atomic.Bool
	runCtx    context.Context
	started   chan struct{}
	startTime time.Time
}

// New returns an Indexer over st that hashes with h. It fails only on a bad
// ignore pattern.
func New(st *store.Store, h Hasher, opt Options) (*Indexer, error) {
	opt.fill()
	paths, err := newPathRules(opt.Roots, opt.Exclude, opt.Ignore)
	if err != nil {
		return nil, fmt.Errorf("indexer: %w", err)
	}
	opt.Roots = paths.roots.Paths()
	ix := &Indexer{
		opt: opt, st: st, h: h, log: opt.Logger, paths: paths,
		ticks: &ticks{suspect: st.Suspect()}, m: &counters{}, idle: &signal{},
		onDemand:  make(chan struct{}, 2),
		started:   make(chan struct{}),
		startTime: time.Now(),
	}
	ix.fsys = newFileSystems(st, ix.log)
	walks, dirs := &walks{}, &dirFds{}
	beforeDir, writesUnread, syncWrites := watchFuncs(opt.Watches)
	ix.pipe = newPipeline(pipeParts{st: st, log: ix.log, m: ix.m, idle: ix.idle, dirs: dirs, walks: walks,
		maxPending: opt.MaxPending, maxWrites: opt.MaxWrites})
	ix.displaced = newDisplaced(st, ix.log)
	ix.scans = newScanner(&scanner{st: st, pipe: ix.pipe, paths: paths, ticks: ix.ticks, fsys: ix.fsys,
		m: ix.m, log: ix.log, idle: ix.idle, walks: walks, walkWorkers: opt.WalkWorkers,
		beforeDir: beforeDir, oneFS: opt.OneFileSystem, displaced: ix.displaced}, opt.Roots)
	ix.removals = newRemovals(opt.RemoveDelay, ix.idle)
	unread := newUnreadWrites(writesUnread, ix.startTime)
	ix.moves = &renamer{st: st, pipe: ix.pipe, paths: paths, ticks: ix.ticks, ledger: opt.Ledger,
		unread: unread, scans: ix.scans, removals: ix.removals, displaced: ix.displaced, log: ix.log}
	ix.check = &checker{pipe: ix.pipe, st: st, h: h, backend: opt.Backend, ledger: opt.Ledger, unread: unread,
		ticks: ix.ticks, paths: paths, scans: ix.scans, moves: ix.moves, displaced: ix.displaced, m: ix.m, log: ix.log,
		maxRetries: opt.MaxRetries, onFinding: opt.OnFinding, sync: syncWrites, dirs: dirs, fsys: ix.fsys}
	ix.feed = &feed{idle: ix.idle}
	return ix, nil
}

// Run runs the workers, the scan scheduler and the removal timer until ctx
// ends, then waits for the writes in flight to be acknowledged (or for a
// short grace period) and returns nil.
func (ix *Indexer) Run(ctx context.Context) error {
	if !ix.running.CompareAndSwap(false, true) {
		return errors.New("indexer: Run called twice")
	}
	ix.runCtx = ctx
	close(ix.started)
	g, gctx := errgroup.WithContext(ctx)
	ix.pipe.start(gctx, g, ix.opt.Workers, ix.check.check)
	g.Go(func() error { return ix.scans.run(gctx) })
	g.Go(func() error { ix.removals.run(gctx, ix.pipe); return nil })
	g.Go(func() error { ix.expireDisplaced(gctx); return nil })
	err := g.Wait()
	ix.pipe.drain(5 * time.Second)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// expireDisplaced waits for the first scans of every root to end, and the
// checks they queued, and then tells the displaced records (settled): each
// walk checked every file under its root, so an inode that a walk met has
// its record again, and one it did not meet is gone, or out of reach when
// a root could not be scanned.
func (ix *Indexer) expireDisplaced(ctx context.Context) {
	select {
	case <-ix.scans.initial:
	case <-ctx.Done():
		return
	}
	// WaitIdle would also wait for changes made since, which is not needed.
	for {
		woken := ix.WorkChanged() // before Working, so that no change between the two is missed
		if !ix.Working() {
			break
		}
		select {
		case <-woken:
		case <-ctx.Done():
			return
		}
	}
	ix.displaced.settled(time.Now().UnixNano(), !ix.scans.initPartial.Load())
}

// ctx is Run's context once it runs: the pipeline's, which outlives a
// caller's request.
func (ix *Indexer) ctx() context.Context {
	select {
	case <-ix.started:
		return ix.runCtx
	default:
		return context.Background()
	}
}

// Changed tells the indexer that the file at path may have changed. It blocks
// while the queue is full.
func (ix *Indexer) Changed(ctx context.Context, path string) {
	if ix.paths.skip(path) {
		return
	}
	ix.pipe.enqueue(ctx, job{path: path}, nil, 0)
}

// Rehash asks for path to be hashed again even when its record looks
// current: a caller found its bytes other than the record says (the
// kernel's compare during deduplication, say). Other bytes with no
// witness of a write are a finding, not the key (judge). It blocks while
// the queue is full, until the indexer stops: a caller's request that
// ends does not take the hash back (dedup.Indexer).
func (ix *Indexer) Rehash(path string) {
	if ix.paths.skip(path) {
		return
	}
	ix.pipe.enqueueRehash(ix.ctx(), path)
}

// Removed tells the indexer that nothing may exist at path any more. The
// records at and under path are dropped after RemoveDelay if path is still
// gone then.
func (ix *Indexer) Removed(path string) {
	if ix.paths.skip(path) {
		return
	}
	ix.removals.later(ix.ctx(), ix.pipe, path)
}

// Moved tells the indexer that the directory at from is now at to: its
// records move along, merging with any already under to, and to is walked
// as for Rescan. Records left under from (in the way of one under to, or
// written there meanwhile) are dropped after RemoveDelay if from is still
// gone then.
func (ix *Indexer) Moved(ctx context.Context, from, to string) {
	if !ix.paths.skipDir(from) && !ix.paths.skipDir(to) {
		m, err := ix.st.Move(ctx, []byte(from), []byte(to))
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			ix.m.errors.Add(1)
			ix.log.Error("cannot move records of a moved directory", "from", from, "to", to, "err", err)
		}
		ix.m.renames.Add(int64(m.Moved))
		ix.log.Debug("directory moved; records moved", "from", from, "to", to, "moved", m.Moved, "left", m.Left)
	}
	if ix.paths.roots.Contains(from) {
		ix.removals.later(ix.ctx(), ix.pipe, from)
	}
	ix.Rescan(to)
}

// Rescan asks for a walk of the directory at path; records under it that the
// walk does not find are dropped. Requests for a path already waiting are
// merged.
func (ix *Indexer) Rescan(path string) {
	if !ix.paths.roots.Contains(path) {
		return
	}
	ix.scans.request(filepath.Clean(path))
}

// Handle acts on one watcher event.
func (ix *Indexer) Handle(ctx context.Context, ev watcher.Event) {
	switch ev.Kind {
	case watcher.Changed:
		ix.Changed(ctx, ev.Path)
	case watcher.Removed:
		ix.Removed(ev.Path)
	case watcher.Moved:
		ix.Moved(ctx, ev.From, ev.Path)
	case watcher.Rescan:
		ix.log.Debug("rescan requested", "path", ev.Path, "reason", ev.Reason)
		ix.Rescan(ev.Path)
	}
}

// Roots returns the roots.
func (ix *Indexer) Roots() []string { return ix.opt.Roots }

// String describes the indexer for logs.
func (ix *Indexer) String() string {
	return fmt.Sprintf("indexer(%d roots)", len(ix.opt.Roots))
}
