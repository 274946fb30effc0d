package indexer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
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

// Hasher is what the indexer needs of the hasher.
type Hasher interface {
	Hash(ctx context.Context, path string, b key.Backend) (hasher.Result, error)
}

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
	// WrittenSince reports that the file at path or inode (dev, ino) may
	// have been written at or after sinceNs (Unix nanoseconds); the rule
	// it serves is in internal/ledger. Nil: writes are known only from stat.
	WrittenSince func(path string, dev, ino uint64, sinceNs int64) bool
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
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// job is one path to check.
type job struct {
	path    string
	scans   []*scan          // scans that saw the path and wait for it to settle
	attempt int              // retries so far after "changed while hashing"
	info    *fsstat.FileInfo // from the walk that queued it, saving an lstat; nil: stat it
	noAdopt bool             // the index was empty when the walk started: no rename to find
	absent  bool             // the walk's check found no record, saving a look-up
}

// Indexer keeps the store's records true. Create it with New, call Run once,
// and feed it paths with Changed, Removed and Rescan.
type Indexer struct {
	opt Options
	st  *store.Store
	h   Hasher
	log *slog.Logger

	queue    chan job
	requeue  requeue
	pend     *pendingSet
	written  *writtenSet   // paths reported written, until their next check
	writes   chan struct{} // semaphore: store writes in flight
	onDemand chan struct{} // semaphore: hashes run by Lookup
	renameMu sync.Mutex
	gran     fsstat.Granularities

	unreadMu     sync.Mutex
	unreadLogged map[string]struct{} // unreadable paths already logged
	ign          ignoreRules

	scans    *scheduler
	removals *removals

	running   atomic.Bool
	runCtx    context.Context
	started   chan struct{}
	initial   chan struct{} // closed when every root was scanned once
	initRoots sync.Map      // root → struct{} until its first full scan ends
	initLeft  atomic.Int64
	startTime time.Time

	m counters
}

// New returns an Indexer over st that hashes with h. It fails only on a bad
// ignore pattern.
func New(st *store.Store, h Hasher, opt Options) (*Indexer, error) {
	opt.fill()
	ign, err := newIgnoreRules(opt.Ignore)
	if err != nil {
		return nil, fmt.Errorf("indexer: %w", err)
	}
	for i, r := range opt.Roots {
		opt.Roots[i] = filepath.Clean(r)
	}
	ix := &Indexer{
		ign:          ign,
		unreadLogged: make(map[string]struct{}),
		opt:          opt,
		st:           st,
		h:            h,
		log:          opt.Logger,
		queue:        make(chan job, opt.MaxPending),
		pend:         newPendingSet(),
		written:      newWrittenSet(),
		writes:       make(chan struct{}, opt.MaxWrites),
		onDemand:     make(chan struct{}, 2),
		started:      make(chan struct{}),
		initial:      make(chan struct{}),

		startTime: time.Now(),
	}
	ix.requeue.signal = make(chan struct{}, 1)
	ix.scans = newScheduler(ix)
	ix.removals = newRemovals(opt.RemoveDelay)
	for _, r := range opt.Roots {
		ix.initRoots.Store(filepath.Clean(r), struct{}{})
	}
	ix.initLeft.Store(int64(len(opt.Roots)))
	if len(opt.Roots) == 0 {
		close(ix.initial)
	}
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
	for range ix.opt.Workers {
		g.Go(func() error { ix.worker(gctx); return nil })
	}
	g.Go(func() error { return ix.scans.run(gctx) })
	g.Go(func() error { ix.removalLoop(gctx); return nil })
	err := g.Wait()
	ix.drainWrites(5 * time.Second)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// drainWrites waits until every submitted write is acknowledged.
func (ix *Indexer) drainWrites(grace time.Duration) {
	deadline := time.After(grace)
	for i := 0; i < cap(ix.writes); i++ {
		select {
		case ix.writes <- struct{}{}:
		case <-deadline:
			ix.log.Warn("writes still in flight at shutdown", "count", cap(ix.writes)-i)
			return
		}
	}
}

// Changed tells the indexer that the file at path may have changed. It blocks
// while the queue is full.
func (ix *Indexer) Changed(ctx context.Context, path string) {
	if ix.skip(path) {
		return
	}
	ix.enqueue(ctx, path, nil, 0)
}

// ChangedWritten is Changed for a path written since its record was
// hashed: its next check hashes it (the rule is in internal/ledger).
func (ix *Indexer) ChangedWritten(ctx context.Context, path string) {
	if ix.skip(path) {
		return
	}
	ix.written.add(path)
	ix.enqueue(ctx, path, nil, 0)
}

// Removed tells the indexer that nothing may exist at path any more. The
// records at and under path are dropped after RemoveDelay if path is still
// gone then.
func (ix *Indexer) Removed(path string) {
	if ix.skip(path) {
		return
	}
	if over, ok := ix.removals.add(path); ok {
		ix.enqueue(ix.ctx(), over, nil, 0)
		ix.removals.done()
	}
}

// Rescan asks for a walk of the directory at path; records under it that the
// walk does not find are dropped. Requests for a path already waiting are
// merged.
func (ix *Indexer) Rescan(path string) {
	if !ix.inRoots(path) {
		return
	}
	ix.scans.request(filepath.Clean(path))
}

func (ix *Indexer) ctx() context.Context {
	select {
	case <-ix.started:
		return ix.runCtx
	default:
		return context.Background()
	}
}

// skip reports paths the indexer never records: outside the roots,
// excluded, or ignored.
func (ix *Indexer) skip(path string) bool {
	return !ix.inRoots(path) || ix.excluded(path) || ix.ignored(path, false)
}

func (ix *Indexer) isRoot(path string) bool {
	for _, r := range ix.opt.Roots {
		if path == r {
			return true
		}
	}
	return false
}

func (ix *Indexer) inRoots(path string) bool {
	for _, r := range ix.opt.Roots {
		if within(path, r) {
			return true
		}
	}
	return false
}

// within reports whether p is dir or under it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// enqueue puts path in the pipeline unless it is already there (then one
// more check is asked for). It blocks while the queue is full.
func (ix *Indexer) enqueue(ctx context.Context, path string, sc *scan, size int64) {
	ix.enqueueJob(ctx, job{path: path}, sc, size)
}

func (ix *Indexer) enqueueJob(ctx context.Context, j job, sc *scan, size int64) {
	if !ix.pend.add(j.path, sc, size) {
		return
	}
	if sc != nil {
		sc.wg.Add(1)
		j.scans = []*scan{sc}
	}
	select {
	case ix.queue <- j:
	case <-ctx.Done():
		ix.finish(j)
	}
}

// requeue holds jobs put back by workers (retries, re-checks); a worker must
// never block on the bounded queue that workers drain.
type requeue struct {
	mu     sync.Mutex
	jobs   []job
	signal chan struct{}
}

func (ix *Indexer) push(j job) {
	ix.requeue.mu.Lock()
	ix.requeue.jobs = append(ix.requeue.jobs, j)
	ix.requeue.mu.Unlock()
	select {
	case ix.requeue.signal <- struct{}{}:
	default:
	}
}

func (ix *Indexer) popRequeued() (job, bool) {
	ix.requeue.mu.Lock()
	defer ix.requeue.mu.Unlock()
	if len(ix.requeue.jobs) == 0 {
		return job{}, false
	}
	j := ix.requeue.jobs[0]
	ix.requeue.jobs = ix.requeue.jobs[1:]
	if len(ix.requeue.jobs) > 0 {
		select {
		case ix.requeue.signal <- struct{}{}:
		default:
		}
	}
	return j, true
}

func (ix *Indexer) next(ctx context.Context) (job, bool) {
	if j, ok := ix.popRequeued(); ok {
		return j, true
	}
	select {
	case j := <-ix.queue:
		return j, true
	case <-ix.requeue.signal:
		return ix.popRequeued()
	case <-ctx.Done():
		return job{}, false
	}
}

func (ix *Indexer) worker(ctx context.Context) {
	for ctx.Err() == nil {
		j, ok := ix.next(ctx)
		if !ok {
			continue
		}
		ix.process(ctx, j)
	}
}

// finish ends j: its scans are told, and the path leaves the pipeline unless
// another check was asked for meanwhile, which is then queued.
func (ix *Indexer) finish(j job) {
	for _, sc := range j.scans {
		sc.wg.Done()
	}
	again, scans := ix.pend.release(j.path)
	if again {
		ix.push(job{path: j.path, scans: scans})
	}
}

// process checks one path and does what it needs.
func (ix *Indexer) process(ctx context.Context, j job) {
	written := ix.written.take(j.path)
	var fi fsstat.FileInfo
	var err error
	if j.info != nil {
		fi, j.info = *j.info, nil
	} else {
		fi, err = fsstat.Lstat(j.path)
	}
	if written {
		ix.recheckLinks(j.path, fi, err == nil)
	}
	switch {
	case isGone(err):
		ix.dropPath(ctx, j)
		return
	case err != nil:
		ix.m.errors.Add(1)
		ix.log.Warn("cannot stat file", "path", j.path, "err", err)
		ix.settle(j)
		return
	case fi.IsDir():
		ix.scans.request(j.path)
		ix.finish(j)
		return
	case !fi.IsRegular():
		ix.dropPath(ctx, j) // a directory may have been replaced: records under it go too
		return
	}
	ix.pend.setSize(j.path, fi.Size)
	ix.gran.Learn(fi.Dev, j.path)
	var rec store.Record
	ok := false
	if j.absent {
		j.absent = false // only for this first check
	} else if rec, ok, err = ix.get(j.path); err != nil {
		ix.m.errors.Add(1)
		ix.log.Error("cannot read index", "path", j.path, "err", err)
		ix.finish(j)
		return
	}
	// A path reported written is hashed even when its record looks
	// current: the record may come from another name (internal/ledger).
	if ok && !written && ix.settled(&rec, fi) {
		ix.settle(j)
		return
	}
	if !ok && !j.noAdopt {
		// A file where a directory was: the records under it are stale.
		ix.dropUnder(ctx, j.path)
	}
	if !ok && !j.noAdopt && !written && ix.adoptRename(ctx, j.path, fi, len(j.scans) > 0) {
		ix.m.renames.Add(1)
		ix.settle(j)
		return
	}
	if wait := ix.tooFresh(fi); wait > 0 {
		// Hashed now, the record would be racily clean and re-hashed at the
		// next check: wait until the timestamp tick has surely passed.
		t := time.AfterFunc(wait, func() { ix.push(j) })
		context.AfterFunc(ctx, func() { t.Stop() })
		return
	}
	ix.hash(ctx, j, fi)
}

// unreadable reports errors that are the file's own: its permissions or
// its storage. They are recorded; anything else is retried.
func unreadable(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EIO) ||
		errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.ENODEV)
}

func isGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// settled reports whether rec still describes the file fi: same identity,
// and either hashed (not racily clean), known to be unreadable, or found
// corrupt by an audit (that finding stands until the file changes).
func (ix *Indexer) settled(rec *store.Record, fi fsstat.FileInfo) bool {
	if !sameIdentity(rec, fi) {
		return false
	}
	switch rec.State {
	case store.StateOK:
		return !ix.racy(rec)
	case store.StateUnreadable, store.StateCorrupt:
		return true
	}
	return false
}

// current reports whether rec holds the key of the file fi right now.
func (ix *Indexer) current(rec *store.Record, fi fsstat.FileInfo) bool {
	return rec.State == store.StateOK && sameIdentity(rec, fi) && !ix.racy(rec)
}

func sameIdentity(rec *store.Record, fi fsstat.FileInfo) bool {
	return rec.Dev == fi.Dev && rec.Ino == fi.Ino && rec.Size == fi.Size &&
		rec.MtimeNs == fi.MtimeNs && rec.CtimeNs == fi.CtimeNs
}

// racy reports a racily clean record: the file's mtime is not older than the
// start of its hashing by more than the file system's timestamp granularity,
// so a later write in the same tick could have left the identity unchanged.
func (ix *Indexer) racy(rec *store.Record) bool {
	return rec.MtimeNs >= rec.HashedAt-int64(ix.gran.Of(rec.Dev))
}

// tooFresh returns how long to wait before hashing fi so that its record is
// not racily clean, or 0.
func (ix *Indexer) tooFresh(fi fsstat.FileInfo) time.Duration {
	age := time.Duration(time.Now().UnixNano() - fi.MtimeNs)
	g := ix.gran.Of(fi.Dev)
	if age < 0 || age > g {
		return 0
	}
	return g - age + time.Millisecond
}

// hash hashes the file and records the result.
func (ix *Indexer) hash(ctx context.Context, j job, fi fsstat.FileInfo) {
	start := time.Now()
	res, err := ix.h.Hash(ctx, j.path, ix.opt.Backend)
	switch {
	case err == nil:
		ix.m.filesHashed.Add(1)
		ix.m.bytesHashed.Add(res.Info.Size)
		rec := ix.okRecord(res, start.UnixNano())
		ix.write(j, putChange(j.path, rec))
	case ctx.Err() != nil:
		ix.finish(j) // shutting down: nothing recorded
	case errors.Is(err, hasher.ErrChanged):
		ix.retry(ctx, j, err)
	case isGone(err) || errors.Is(err, hasher.ErrNotRegular):
		ix.dropFile(j)
	case !unreadable(err):
		// Not the file's fault (out of descriptors, an external hasher
		// that failed): try again later.
		ix.m.errors.Add(1)
		ix.retry(ctx, j, err)
	default:
		ix.m.errors.Add(1)
		ix.log.Warn("cannot read file", "path", j.path, "err", err)
		rec := store.Record{
			Size: fi.Size, MtimeNs: fi.MtimeNs, CtimeNs: fi.CtimeNs, Dev: fi.Dev, Ino: fi.Ino,
			HashedAt: start.UnixNano(), State: store.StateUnreadable, Generation: ix.scans.generation(),
		}
		ix.write(j, putChange(j.path, rec))
	}
}

// okRecord builds the record of a successful hash that started at startNs.
func (ix *Indexer) okRecord(res hasher.Result, startNs int64) store.Record {
	fi := res.Info
	rec := store.Record{
		Backend: ix.opt.Backend, Digest: res.Digest,
		Size: fi.Size, MtimeNs: fi.MtimeNs, CtimeNs: fi.CtimeNs, Dev: fi.Dev, Ino: fi.Ino,
		HashedAt: startNs, VerifiedAt: startNs, State: store.StateOK, Generation: ix.scans.generation(),
	}
	return rec
}

// retry puts a file that changed while it was hashed (or could not be hashed
// for a reason that may pass) back in the pipeline after a backoff. Scans waiting for it are released and the old record is
// kept for them, so a sweep does not drop a file that merely keeps changing.
func (ix *Indexer) retry(ctx context.Context, j job, err error) {
	ix.m.retries.Add(1)
	for _, sc := range j.scans {
		ix.markSeen(j.path, sc)
		sc.wg.Done()
	}
	j.scans = nil
	if j.attempt >= ix.opt.MaxRetries {
		ix.log.Warn("cannot hash file after retries; giving up until it changes again",
			"path", j.path, "attempts", j.attempt+1, "err", err)
		ix.finish(j)
		return
	}
	ix.log.Debug("cannot hash file now; retrying", "path", j.path, "attempt", j.attempt+1, "err", err)
	delay := backoff(j.attempt)
	j.attempt++
	t := time.AfterFunc(delay, func() { ix.push(j) })
	context.AfterFunc(ctx, func() { t.Stop() })
}

// backoff is 250 ms doubling per attempt, capped at 2 minutes.
func backoff(attempt int) time.Duration {
	d := 250 * time.Millisecond << min(attempt, 9)
	return min(d, 2*time.Minute)
}

// settle ends a job whose record is already right: scans mark it seen.
func (ix *Indexer) settle(j job) {
	for _, sc := range j.scans {
		ix.markSeen(j.path, sc)
	}
	ix.finish(j)
}

// dropFile removes the record of a path that is not a regular file.
func (ix *Indexer) dropFile(j job) {
	if _, ok, _ := ix.get(j.path); !ok {
		ix.finish(j)
		return
	}
	ix.m.removed.Add(1)
	ix.write(j, deleteChange(j.path))
}

// dropPath removes the records at and under a path that no longer exists.
func (ix *Indexer) dropPath(ctx context.Context, j job) {
	if ix.isRoot(j.path) {
		// A root that vanished (an unmounted disk, say) keeps its records
		// until a scan of it finds it again.
		ix.log.Warn("root is gone; keeping its records", "root", j.path)
		ix.finish(j)
		return
	}
	n, err := ix.deleteSubtree(ctx, j.path)
	if err != nil {
		ix.m.errors.Add(1)
		ix.log.Error("cannot drop records", "path", j.path, "err", err)
	}
	ix.m.removed.Add(int64(n))
	ix.finish(j)
}

// dropUnder removes the records under path (a file now). It holds
// renameMu, so records a rename is moving to path are not caught midway.
func (ix *Indexer) dropUnder(ctx context.Context, path string) {
	ix.renameMu.Lock()
	defer ix.renameMu.Unlock()
	n, err := ix.deleteBelow(ctx, path)
	if err != nil {
		ix.m.errors.Add(1)
		ix.log.Error("cannot drop records", "path", path, "err", err)
	}
	ix.m.removed.Add(int64(n))
}

// write submits a change; j finishes when it is durable.
func (ix *Indexer) write(j job, c store.Change) {
	ix.writes <- struct{}{}
	ix.submit(c, func(err error) {
		<-ix.writes
		if err != nil {
			ix.m.errors.Add(1)
			ix.log.Error("cannot write index", "path", j.path, "err", err)
		}
		ix.finish(j)
	})
}

// markSeen records that scan sc saw path, so its sweep keeps the record.
func (ix *Indexer) markSeen(path string, sc *scan) {
	sc.wg.Add(1)
	ix.writes <- struct{}{}
	ix.submit(markChange(path, sc.gen), func(err error) {
		<-ix.writes
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			sc.errs.Add(1)
			ix.log.Error("cannot mark record", "path", path, "err", err)
		}
		sc.wg.Done()
	})
}

// adoptRename gives path the record of the file it was renamed from, when
// the store knows a record with the same (dev, ino, size, mtime) under a
// path where that file no longer is, and the file at path was not born
// after the record's ctime (where the file system keeps birth times): a new
// file that reuses a deleted file's inode, size and mtime is hashed, not
// taken for a rename. A rename changes ctime, so ctime alone cannot tell
// them apart; where birth times are not kept, nothing can. A rewrite that
// set the mtime back is left to Options.WrittenSince (internal/ledger) and
// to the old path waiting in the pipeline. A file whose ctime is the
// record's moved with its directory: the ledger is not asked. A hard link takes another name's record only when
// that record's ctime is the inode's ctime now (creating the link changes
// it, so a new link is hashed once), and a renamed file with other names
// is hashed unless its ctime is unchanged (it moved with its directory). A renamed directory moves all its
// records at once (and, unless a walk found path, has the new directory
// walked, to drop the records of files that were not in it). It reports
// whether path now has a usable record.
func (ix *Indexer) adoptRename(ctx context.Context, path string, fi fsstat.FileInfo, walked bool) bool {
	ix.renameMu.Lock()
	defer ix.renameMu.Unlock()
	if rec, ok, err := ix.get(path); err == nil && ok && sameIdentity(&rec, fi) {
		return !ix.racy(&rec) // another worker moved it meanwhile
	}
	oldPath, rec, ok, err := ix.byInode(fi.Dev, fi.Ino, path)
	if err != nil || !ok || oldPath == path || rec.State != store.StateOK ||
		rec.Size != fi.Size || rec.MtimeNs != fi.MtimeNs || ix.racy(&rec) ||
		fsstat.BornAfter(path, fi.Ino, rec.CtimeNs) ||
		(rec.CtimeNs != fi.CtimeNs && ix.writtenSince(rec.HashedAt, fi, path, oldPath)) ||
		ix.linkBusy(fi.Dev, fi.Ino, path) || !ix.unchanged(oldPath, &rec) {
		// A name of the inode waiting in the pipeline was reported
		// changed, or another name was: its record may predate that change.
		return false
	}
	if cur, err := fsstat.Lstat(oldPath); err == nil && cur.Dev == fi.Dev && cur.Ino == fi.Ino {
		// A hard link: both names hold the same content, and share one
		// ctime. A record whose ctime is not the inode's ctime now may
		// predate a write through any of the names: hash instead.
		if rec.CtimeNs != cur.CtimeNs {
			return false
		}
		return ix.putSync(ctx, path, withIdentity(rec, fi, ix.scans.generation())) == nil
	} else if err == nil || !isGone(err) {
		return false // the old path holds something else now: trust nothing
	}
	if rec.CtimeNs != fi.CtimeNs && fi.Nlink > 1 {
		// Renamed (or written) with other names: a write through one of
		// them shows in no field a rename leaves alone. (A file moved
		// with its directory keeps its ctime.)
		return false
	}
	from, to := renamedDirs(oldPath, path)
	dirMoved := from != "" && ix.dirGone(from)
	// The whole directory moves only to a place that holds no records yet:
	// after "mv a/* b/; rmdir a", b's own records must stay.
	if dirMoved && !ix.isRoot(from) && ix.inRoots(to) && !ix.hasRecords(to) {
		if err := ix.rename(ctx, from, to); err != nil {
			ix.log.Warn("cannot move records of renamed directory", "from", from, "to", to, "err", err)
			return false
		}
		ix.log.Debug("directory renamed; records moved", "from", from, "to", to)
		if !walked {
			// The old directory may be gone after its files were moved
			// out one by one and the rest deleted: the records of those
			// came along. A walk of the new one drops them (a walk that
			// queued path sweeps them itself).
			ix.scans.request(to)
		}
	} else if err := ix.rename(ctx, oldPath, path); err != nil {
		ix.log.Warn("cannot move record of renamed file", "from", oldPath, "to", path, "err", err)
		return false
	}
	// A rename changes the file's ctime: store the new identity.
	return ix.putSync(ctx, path, withIdentity(rec, fi, ix.scans.generation())) == nil
}

// linkBusy reports whether a recorded name of inode (dev, ino) other than
// path waits in the pipeline or was reported written: its record, or a
// record of another name, may predate a write.
func (ix *Indexer) linkBusy(dev, ino uint64, path string) bool {
	paths, err := ix.st.ByInodeAll(dev, ino)
	if err != nil {
		return true
	}
	for _, p := range paths {
		if q := string(p); q != path && (ix.pend.has(q) || ix.written.has(q)) {
			return true
		}
	}
	return false
}

// unchanged reports whether path's record is still rec. A check of path
// that ended after rec was read (rewritten, or gone) was in the pipeline
// until then: read again after linkBusy, the record tells.
func (ix *Indexer) unchanged(path string, rec *store.Record) bool {
	cur, ok, err := ix.get(path)
	return err == nil && ok && cur.HashedAt == rec.HashedAt && sameIdentity(&cur, fsstat.FileInfo{
		Dev: rec.Dev, Ino: rec.Ino, Size: rec.Size, MtimeNs: rec.MtimeNs, CtimeNs: rec.CtimeNs})
}

// recheckLinks queues the other recorded names of the inode that path had
// when it was recorded, and of the inode it has now (fi, when statOK) if
// that has other names: a write through one hard link comes as an event
// for that name alone, and the others' records would keep the old digest
// (and, with the mtime set back, be taken by a rename of them). The path
// being checked stays in the pipeline until they are queued, so no rename
// adopts their records meanwhile (linkBusy).
func (ix *Indexer) recheckLinks(path string, fi fsstat.FileInfo, statOK bool) {
	type inode struct{ dev, ino uint64 }
	var ids []inode
	if rec, ok, err := ix.get(path); err == nil && ok {
		ids = append(ids, inode{rec.Dev, rec.Ino})
	}
	if statOK && fi.IsRegular() && fi.Nlink > 1 && (len(ids) == 0 || ids[0] != inode{fi.Dev, fi.Ino}) {
		ids = append(ids, inode{fi.Dev, fi.Ino})
	}
	for _, id := range ids {
		paths, err := ix.st.ByInodeAll(id.dev, id.ino)
		if err != nil {
			ix.m.errors.Add(1)
			ix.log.Error("cannot read index", "path", path, "err", err)
			continue
		}
		for _, p := range paths {
			// Records outside the roots (kept from an older
			// configuration) or ignored are left alone.
			if q := string(p); q != path && !ix.skip(q) && ix.pend.add(q, nil, 0) {
				ix.push(job{path: q})
			}
		}
	}
}

// writtenSince reports that the watcher saw a write to the file fi under
// any of paths at or after sinceNs.
func (ix *Indexer) writtenSince(sinceNs int64, fi fsstat.FileInfo, paths ...string) bool {
	if ix.opt.WrittenSince == nil {
		return false
	}
	for _, p := range paths {
		if ix.opt.WrittenSince(p, fi.Dev, fi.Ino, sinceNs) {
			return true
		}
	}
	return false
}

func withIdentity(rec store.Record, fi fsstat.FileInfo, gen uint64) store.Record {
	rec.Dev, rec.Ino, rec.Size, rec.MtimeNs, rec.CtimeNs = fi.Dev, fi.Ino, fi.Size, fi.MtimeNs, fi.CtimeNs
	rec.Generation = gen
	return rec
}

// renamedDirs returns the parent directories of a file's old and new path
// when only the directory changed ("/a/x/f" → "/b/y/f": "/a/x", "/b/y"), or
// "" when the file itself was renamed. Moving the records of the old parent
// as a whole is right when that parent no longer exists: it was renamed or
// moved, and its other files follow without a look-up each.
func renamedDirs(oldPath, newPath string) (from, to string) {
	if filepath.Base(oldPath) != filepath.Base(newPath) {
		return "", ""
	}
	from, to = filepath.Dir(oldPath), filepath.Dir(newPath)
	if from == to {
		return "", ""
	}
	return from, to
}

func (ix *Indexer) dirGone(dir string) bool {
	_, err := fsstat.Lstat(dir)
	return isGone(err)
}

// String describes the indexer for logs.
func (ix *Indexer) String() string {
	return fmt.Sprintf("indexer(%d roots)", len(ix.opt.Roots))
}

// Follow feeds the watcher's events to the indexer until the channel is
// closed or ctx ends.
func (ix *Indexer) Follow(ctx context.Context, events <-chan watcher.Event) {
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			ix.Handle(ctx, ev)
		case <-ctx.Done():
			return
		}
	}
}

// Handle acts on one watcher event.
func (ix *Indexer) Handle(ctx context.Context, ev watcher.Event) {
	switch ev.Kind {
	case watcher.Changed:
		if ix.writtenSinceRecord(ev.Path) {
			ix.ChangedWritten(ctx, ev.Path)
			return
		}
		ix.Changed(ctx, ev.Path)
	case watcher.Removed:
		ix.Removed(ev.Path)
	case watcher.Moved:
		ix.Removed(ev.From)
		ix.Rescan(ev.Path)
	case watcher.Rescan:
		ix.log.Debug("rescan requested", "path", ev.Path, "reason", ev.Reason)
		ix.Rescan(ev.Path)
	}
}

// writtenSinceRecord reports that Options.WrittenSince saw path written
// after its record was hashed, or at all when it has none.
func (ix *Indexer) writtenSinceRecord(path string) bool {
	w := ix.opt.WrittenSince
	if w == nil || !w(path, 0, 0, 0) {
		return false
	}
	rec, ok, err := ix.get(path)
	if err != nil || !ok {
		return true
	}
	return w(path, 0, 0, rec.HashedAt)
}
