package hasher

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/key"
)

// Hasher routes files to inline hashing, a bounded worker pool, a batch
// engine or an external program, as its Policy says. It is safe for many
// concurrent callers. Its workers block on channels while idle.
type Hasher struct {
	p    Policy
	log  *slog.Logger
	ro   readOpts
	ext  *externalHasher
	jobs chan *job // pool and external jobs; unbuffered
	bat  chan *job // batch jobs; buffered so a worker can gather several

	lanes   int          // of one batch engine; 0 without one
	small   bool         // small SHA-256 files go to the lanes
	coming  atomic.Int64 // batch jobs decided on but not taken by a worker yet
	readers readSlots    // small files read at once per device, for the lanes
	joinMu  sync.Mutex   // guards open and the sends to a run's joined
	open    []*batchRun  // runs whose engines take jobs other workers hand on

	stop   context.CancelFunc
	base   context.Context
	mu     sync.RWMutex // held shared while submitting, exclusively by Close
	closed bool
	wg     sync.WaitGroup
}

type job struct {
	ctx    context.Context
	path   string
	b      key.Backend
	before fsstat.FileInfo
	route  route
	data   *[]byte      // a small file read and checked by its caller, for the lanes
	f      *stableFile  // the open file of a batch job, or of a pool job its caller opened; closed with its answer
	ahead  int64        // bytes of f asked of the kernel, or found in memory
	done   chan outcome // buffered 1
}

// closeFile closes the job's file, once: by the worker that answers the job,
// or by the caller when the job never reached a worker.
func (j *job) closeFile() {
	if j.f != nil {
		j.f.close()
		j.f = nil
	}
}

type outcome struct {
	res Result
	err error
}

// New starts a Hasher following p (zero fields take their defaults). An
// invalid policy is logged and replaced by DefaultPolicy; use
// Policy.Validate first to reject it instead. log may be nil.
func New(p Policy, log *slog.Logger) *Hasher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := p.Validate(); err != nil {
		log.Warn("hasher: invalid policy, using defaults", "err", err)
		p = Policy{Batch: p.Batch, BatchMin: p.BatchMin}
	}
	p = p.withDefaults()
	h := &Hasher{
		p:    p,
		log:  log,
		ro:   p.readOpts(),
		jobs: make(chan *job),
	}
	if p.ExternalMin > 0 {
		kind, _ := ExternalKindOf(p.External)
		h.ext = &externalHasher{path: p.External, kind: kind}
	}
	if p.Batch != nil {
		h.lanes = max(p.Batch().Lanes(), 1)
		h.bat = make(chan *job, 2*p.Workers*h.lanes)
		// One lane at a time is what inline hashing does.
		h.small = !p.SmallInline && h.lanes > 1
	}
	h.readers.n = p.Readers
	h.base, h.stop = context.WithCancel(context.Background())
	for range p.Workers {
		h.wg.Add(1)
		go h.worker()
	}
	return h
}

// Policy returns the policy in effect, defaults filled in.
func (h *Hasher) Policy() Policy { return h.p }

// Streams is how many files callers should hash at once to keep this Hasher
// at full speed: enough to fill every batch engine's lanes twice over (half
// of them in the lanes, half reading the next files), or two per worker
// without batching.
func (h *Hasher) Streams() int {
	if h.small {
		return 2 * h.p.Workers * h.lanes
	}
	return 2 * h.p.Workers
}

// Hash hashes the file at path with backend b and blocks until done. Errors
// are those of HashFile, plus ErrClosed after Close.
func (h *Hasher) Hash(ctx context.Context, path string, b key.Backend) (Result, error) {
	return h.hash(ctx, path, b, nil)
}

// HashStat is Hash with before, an lstat of path that the caller took (a
// tree walk's), standing for the one Hash would take first. It must be from
// before the call: the file's identity is checked against it after opening
// and after reading, so any change since then fails the hash.
func (h *Hasher) HashStat(ctx context.Context, path string, b key.Backend, before fsstat.FileInfo) (Result, error) {
	return h.hash(ctx, path, b, &before)
}

func (h *Hasher) hash(ctx context.Context, path string, b key.Backend, before *fsstat.FileInfo) (Result, error) {
	if !Supported(b) {
		return Result{}, fmt.Errorf("%w: %s", ErrBackend, b)
	}
	if h.base.Err() != nil {
		return Result{}, ErrClosed
	}
	fi, err := regularStat(path, before)
	if err != nil {
		return Result{}, err
	}
	return h.route(ctx, path, b, fi, nil)
}

// HashOpen is HashStat for a file that Open returned: the identity of its
// descriptor stands for the lstat. HashOpen takes f over and closes it.
func (h *Hasher) HashOpen(ctx context.Context, f *File, b key.Backend) (Result, error) {
	sf := f.take()
	if sf == nil {
		return Result{}, errFileTaken
	}
	if !Supported(b) {
		sf.close()
		return Result{}, fmt.Errorf("%w: %s", ErrBackend, b)
	}
	if h.base.Err() != nil {
		sf.close()
		return Result{}, ErrClosed
	}
	return h.route(ctx, sf.path, b, sf.before, sf)
}

// route hashes the regular file fi at path the way the policy says. f is
// the file already open, or nil to open it; route closes it.
func (h *Hasher) route(ctx context.Context, path string, b key.Backend, fi fsstat.FileInfo, f *stableFile) (Result, error) {
	r := h.p.route(fi.Size, isSHA256(b))
	if r == routeInline && fi.Size > 0 && isSHA256(b) && h.small {
		if fi.Size <= laneMemMax {
			return h.hashInLanes(ctx, path, b, fi, f)
		}
		r = routeBatch // read by the engine, as large files are
	}
	switch r {
	case routeInline:
		if f == nil {
			return hashFile(ctx, path, b, &fi, h.ro)
		}
		defer f.close()
		return hashOpenWith(ctx, f, b, h.ro)
	case routeBatch:
		return h.hashQueued(ctx, path, b, fi, f)
	case routeExternal:
		if f != nil {
			f.close() // the external route opens the path again and checks it
			f = nil
		}
	}
	res, _, err := h.await(&job{ctx: ctx, path: path, b: b, before: fi, route: r, f: f, done: make(chan outcome, 1)})
	return res, err
}

// openIf returns f, or when it is nil, path opened and checked against fi.
func openIf(path string, fi fsstat.FileInfo, f *stableFile) (*stableFile, error) {
	if f != nil {
		return f, nil
	}
	return openStable(path, &fi)
}

// hashQueued opens a file for a batch engine and asks the kernel for its
// start before queueing it: the disk reads the file while it waits for a
// lane, and the engine does not stall on it. The job owns the descriptor.
func (h *Hasher) hashQueued(ctx context.Context, path string, b key.Backend, fi fsstat.FileInfo, f *stableFile) (Result, error) {
	if err := ctx.Err(); err != nil {
		if f != nil {
			f.close()
		}
		return Result{}, err
	}
	f, err := openIf(path, fi, f)
	if err != nil {
		return Result{}, err
	}
	ahead := f.before.Size // a cold stream reads ahead itself
	if !f.startCold(h.ro) {
		ahead = adviseStart(f)
	}
	j := &job{ctx: ctx, path: path, b: b, before: f.before, route: routeBatch, f: f, ahead: ahead, done: make(chan outcome, 1)}
	h.coming.Add(1)
	res, _, err := h.await(j)
	return res, err
}

// hashInLanes reads a small file (holding one of its device's read slots)
// and has a batch engine hash the bytes in a lane beside other files.
func (h *Hasher) hashInLanes(ctx context.Context, path string, b key.Backend, fi fsstat.FileInfo, f *stableFile) (Result, error) {
	f, err := openIf(path, fi, f)
	if err != nil {
		return Result{}, err
	}
	h.coming.Add(1) // the workers wait for it rather than finish their lanes off
	data, info, err := h.readSmall(ctx, f)
	f.close()
	if err != nil {
		h.coming.Add(-1)
		return Result{}, err
	}
	res, answered, err := h.await(&job{ctx: ctx, path: path, b: b, before: info, route: routeBatch, data: data, done: make(chan outcome, 1)})
	if answered {
		putData(data) // else a lane may still read it: the collector takes it
	}
	return res, err
}

// readSmall reads f whole while holding one of its device's read slots.
// When every slot is taken the disk is behind, so f's data is asked for
// first (POSIX_FADV_WILLNEED): the kernel reads it while f waits for a
// slot, and the read finds it in memory, not with O_DIRECT (which would
// skip those pages). Not asking for files that would otherwise be read
// directly was 2 % slower cold (BENCHMARKS.md). A warm scan rarely waits.
func (h *Hasher) readSmall(ctx context.Context, f *stableFile) (*[]byte, fsstat.FileInfo, error) {
	release, ok := h.readers.tryAcquire(f.before.Dev)
	if !ok {
		_ = unix.Fadvise(f.fd, 0, f.before.Size, unix.FADV_WILLNEED)
		var err error
		if release, err = h.readers.acquire(ctx, f.before.Dev); err != nil {
			return nil, fsstat.FileInfo{}, err
		}
	}
	defer release()
	return readOpen(ctx, f, h.ro)
}

// await hands j to the workers and waits for its outcome; answered is false
// when j's context ended first, while a worker may still use what j holds.
func (h *Hasher) await(j *job) (res Result, answered bool, err error) {
	if err := h.submit(j); err != nil {
		j.closeFile() // no worker has it
		if j.route == routeBatch {
			h.coming.Add(-1)
		}
		return Result{}, true, err
	}
	select {
	case o := <-j.done:
		return o.res, true, o.err
	case <-j.ctx.Done():
		return Result{}, false, j.ctx.Err()
	}
}

func (h *Hasher) submit(j *job) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return ErrClosed
	}
	q := h.jobs
	if j.route == routeBatch {
		q = h.bat
	}
	select {
	case q <- j:
		return nil
	case <-j.ctx.Done():
		return j.ctx.Err()
	case <-h.base.Done():
		return ErrClosed
	}
}

// Close stops the workers, cancelling the files they are hashing; callers
// waiting on those get ErrClosed. It is safe to call more than once.
func (h *Hasher) Close() error {
	h.stop()
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.wg.Wait()
	for h.bat != nil {
		select {
		case j := <-h.bat:
			h.finish(j, Result{}, ErrClosed)
		default:
			return nil
		}
	}
	return nil
}

func (h *Hasher) worker() {
	defer h.wg.Done()
	var eng BatchEngine // this worker's own, made on first use
	for {
		select {
		case <-h.base.Done():
			return
		case j := <-h.jobs:
			h.runOne(j)
		case j := <-h.bat:
			h.coming.Add(-1)
			if h.base.Err() != nil { // select picks at random once closed
				h.finish(j, Result{}, ErrClosed)
				continue
			}
			if b := h.claim(j); b != nil {
				h.runBatch(b, &eng)
			}
		}
	}
}

// jobCtx is the job's context, also cancelled by Close.
func (h *Hasher) jobCtx(j *job) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(j.ctx)
	stop := context.AfterFunc(h.base, cancel)
	return ctx, func() { stop(); cancel() }
}

// finish answers j, closing its file first.
func (h *Hasher) finish(j *job, res Result, err error) {
	j.closeFile()
	if err != nil && h.base.Err() != nil && j.ctx.Err() == nil && errors.Is(err, context.Canceled) {
		err = ErrClosed
	}
	j.done <- outcome{res: res, err: err}
}

func (h *Hasher) runOne(j *job) {
	ctx, cancel := h.jobCtx(j)
	defer cancel()
	res, err := h.hashOne(ctx, j)
	h.finish(j, res, err)
}

func (h *Hasher) hashOne(ctx context.Context, j *job) (Result, error) {
	if j.data != nil {
		d := sha256.Sum256(*j.data)
		return Result{Digest: d[:], Info: j.before}, nil
	}
	if j.f != nil { // a batch job hashed alone, or a pool job opened by its caller
		return hashOpenWith(ctx, j.f, j.b, h.ro)
	}
	if j.route != routeExternal {
		return hashFile(ctx, j.path, j.b, &j.before, h.ro)
	}
	res, err := h.ext.hashFile(ctx, j.path, &j.before, h.ro)
	if errors.Is(err, ErrExternal) {
		// The program is gone or misbehaves: never fail a file for it.
		h.log.Warn("hasher: external hasher failed, hashing in-process", "program", h.ext.path, "path", j.path, "err", err)
		return hashFile(ctx, j.path, j.b, nil, h.ro)
	}
	return res, err
}

// runBatch hashes b's first job and whatever batch jobs are queued, or
// queue up or are handed to b while it runs, with the worker's engine.
// With too few queued it hashes the first file alone, unless that is
// large (claim listed its run): the engine hashes it alone a slice at a
// time until others join it in the lanes. The indexer opens large files
// one after another, and the second is seldom queued when the first is
// taken.
func (h *Hasher) runBatch(b *batchRun, eng *BatchEngine) {
	if !b.listed {
		alone := func() bool { return len(h.bat)+1 < h.p.BatchMinStreams && h.coming.Load() <= 0 }
		if alone() {
			runtime.Gosched() // callers woken by the last results may queue more
		}
		if alone() {
			h.runOne(b.first)
			return
		}
		h.openRun(b)
	}
	if *eng == nil {
		*eng = h.p.Batch()
	}
	ctx, cancel := context.WithCancel(h.base)
	defer cancel()
	for {
		err := (*eng).Hash(ctx, b.next, b.finish)
		if err == nil {
			err = fmt.Errorf("%w: it returned without finishing every stream", errBatchEngine)
		}
		b.abort(err)
		// Jobs handed over as the engine ran dry start another round.
		left := h.closeRun(b)
		if len(left) == 0 {
			return
		}
		b = h.newRun(left[0])
		for _, j := range left[1:] {
			b.joined <- j
		}
		h.openRun(b)
	}
}
