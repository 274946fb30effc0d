package hasher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

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
	done   chan outcome // buffered 1
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
		ro:   readOpts{impl: p.SHA256, bufSize: p.BufferSize, readAhead: p.ReadAhead, syncWindow: p.SyncWindow},
		jobs: make(chan *job),
	}
	if p.ExternalMin > 0 {
		kind, _ := ExternalKindOf(p.External)
		h.ext = &externalHasher{path: p.External, kind: kind}
	}
	if p.Batch != nil {
		h.bat = make(chan *job, p.Workers*max(p.Batch().Lanes(), 1))
	}
	h.base, h.stop = context.WithCancel(context.Background())
	for range p.Workers {
		h.wg.Add(1)
		go h.worker()
	}
	return h
}

// Policy returns the policy in effect, defaults filled in.
func (h *Hasher) Policy() Policy { return h.p }

// Hash hashes the file at path with backend b and blocks until done. Errors
// are those of HashFile, plus ErrClosed after Close.
func (h *Hasher) Hash(ctx context.Context, path string, b key.Backend) (Result, error) {
	if !Supported(b) {
		return Result{}, fmt.Errorf("%w: %s", ErrBackend, b)
	}
	if h.base.Err() != nil {
		return Result{}, ErrClosed
	}
	fi, err := fsstat.Lstat(path)
	if err != nil {
		return Result{}, err
	}
	if !fi.IsRegular() {
		return Result{}, notRegular(path, fi)
	}
	r := h.p.route(fi.Size, isSHA256(b))
	if r == routeInline {
		return hashFile(ctx, path, b, &fi, h.ro)
	}
	j := &job{ctx: ctx, path: path, b: b, before: fi, route: r, done: make(chan outcome, 1)}
	if err := h.submit(j); err != nil {
		return Result{}, err
	}
	select {
	case o := <-j.done:
		return o.res, o.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
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
			j.done <- outcome{err: ErrClosed}
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
			h.runBatch(j, &eng)
		}
	}
}

// jobCtx is the job's context, also cancelled by Close.
func (h *Hasher) jobCtx(j *job) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(j.ctx)
	stop := context.AfterFunc(h.base, cancel)
	return ctx, func() { stop(); cancel() }
}

func (h *Hasher) finish(j *job, res Result, err error) {
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

// runBatch hashes first and whatever batch jobs are queued, or queue up
// while it runs, with the worker's engine; with too few queued it hashes
// first alone.
func (h *Hasher) runBatch(first *job, eng *BatchEngine) {
	if len(h.bat)+1 < h.p.BatchMinStreams {
		h.runOne(first)
		return
	}
	if *eng == nil {
		*eng = h.p.Batch()
	}
	ctx, cancel := context.WithCancel(h.base)
	defer cancel()
	b := &batchRun{h: h, first: first}
	err := (*eng).Hash(ctx, b.next, b.finish)
	if err == nil {
		err = fmt.Errorf("%w: it returned without finishing every stream", errBatchEngine)
	}
	b.abort(err)
}
