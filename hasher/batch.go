package hasher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/hasher/mbsha256"
)

// BatchEngine hashes several SHA-256 streams at once, for example one per
// lane of a multi-buffer SIMD kernel. Each pool worker gets its own engine
// from Policy.Batch and is its only user. An engine must not keep goroutines
// or timers running between calls: an idle Hasher costs no CPU.
type BatchEngine interface {
	// Lanes is how many streams the engine hashes at full speed at once.
	Lanes() int
	// Hash pulls streams from next, reads each to its end, and calls done
	// with the stream's position in next's sequence (0, 1, …) and its
	// digest, or the error that ended reading it, as soon as that stream is
	// finished; done is called once per stream taken, on the caller's
	// goroutine. next says what it gave as mbsha256.HashFeed's does:
	// Taken, Dry (none now) or Soon (more coming; with wait set, next
	// blocks until it has one or is dry). Hash returns once next is Dry
	// with no stream in flight. One stream's error must not affect the
	// others. Hash returns ctx.Err() when ctx ends first.
	Hash(ctx context.Context, next func(wait bool) (Stream, mbsha256.Feed), done func(i int, sum [32]byte, err error)) error
}

// Stream is one input of a BatchEngine: R read to its end, or, when R is
// nil, the bytes of Data (a small file its caller read and checked).
type Stream struct {
	Data []byte
	R    io.Reader
}

// streamReader reads a stableFile up to its recorded size; a file that ends
// early reads as a *ChangedError, and once its job's context is done every
// read fails with the context's error, so that a cancelled file leaves the
// engine while the others in the batch go on.
type streamReader struct {
	ctx     context.Context
	f       *stableFile
	left    int64
	read    int64 // bytes read so far
	advised int64 // bytes asked of the page cache ahead of reading
}

// prefetchWindow is how far ahead of an engine's reading a stream's data is
// asked for (POSIX_FADV_WILLNEED): the kernel reads it while the engine
// hashes its other lanes, so that one file still on disk does not stall
// them all. A file wholly in the page cache is not advised: on a warm
// corpus the advice cost a third as much CPU as copying the data.
const prefetchWindow = 8 << 20

// adviseStart asks the kernel for f's first prefetchWindow bytes unless all
// of f is in the page cache, and returns how much of f it asked for or found.
// The same look tells makeDurable whether f has dirty pages.
func adviseStart(f *stableFile) int64 {
	if f.lookInCache() {
		return f.before.Size
	}
	n := min(f.before.Size, prefetchWindow)
	_ = unix.Fadvise(f.fd, 0, n, unix.FADV_WILLNEED)
	return n
}

func (r *streamReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	if r.read+prefetchWindow/2 >= r.advised && r.advised < r.f.before.Size {
		_ = unix.Fadvise(r.f.fd, r.advised, prefetchWindow, unix.FADV_WILLNEED)
		r.advised += prefetchWindow
	}
	var n int
	var err error
	if r.f.cold != nil {
		n, err = r.f.cold.read(p)
	} else {
		n, err = r.f.read(p)
	}
	r.left -= int64(n)
	r.read += int64(n)
	return n, err
}

// errBatchEngine reports a BatchEngine that broke its contract; the file's
// digest is not used.
var errBatchEngine = errors.New("hasher: batch engine misbehaved")

// batchRun is one call of a worker's engine. An engine runs for as long
// as jobs keep coming, on a warm first scan often the whole scan, so it
// keeps only the jobs in flight: a finished job is dropped at once, and a
// run holds about Lanes jobs, not every file it hashed.
type batchRun struct {
	h     *Hasher
	first *job
	taken int        // streams handed to the engine; the next one's position
	open  []inflight // the streams not finished yet, in no order
	// held counts the jobs the run holds and has not answered: first, and
	// those in the engine's lanes. Other workers read it (claim).
	held atomic.Int32
	// joined holds large-file jobs other workers handed to this run while
	// its engine had free lanes (Hasher.claim); it takes them before the
	// queue. Its capacity is the engine's lanes.
	joined chan *job
	listed bool // on the Hasher's list of open runs
}

// inflight is a stream the engine took and has not finished.
type inflight struct {
	pos int           // its position in next's sequence
	j   *job          // its job
	r   *streamReader // nil for a small file read and checked by its caller
}

// add records j's stream as taken.
func (b *batchRun) add(j *job, r *streamReader) {
	b.open = append(b.open, inflight{pos: b.taken, j: j, r: r})
	b.taken++
}

// drop removes and returns the stream at position i; ok is false when
// it is not in flight (finished already, or never taken).
func (b *batchRun) drop(i int) (e inflight, ok bool) {
	for k := range b.open {
		if b.open[k].pos == i {
			e = b.open[k]
			last := len(b.open) - 1
			b.open[k] = b.open[last]
			b.open[last] = inflight{} // the job is no longer reachable from here
			b.open = b.open[:last]
			return e, true
		}
	}
	return inflight{}, false
}

// next hands the engine the first job, then any job queued by then. With
// none queued it says Soon while callers are about to queue more (they
// are reading their files), and with wait it waits for one; else Dry.
// A job comes with its file open (job.f), or, for a small file, read and
// checked already (job.data).
func (b *batchRun) next(wait bool) (Stream, mbsha256.Feed) {
	for {
		j := b.first
		b.first = nil
		if j == nil {
			var f mbsha256.Feed
			if j, f = b.take(wait); j == nil {
				return Stream{}, f
			}
			b.held.Add(1)
		}
		if err := j.ctx.Err(); err != nil {
			b.held.Add(-1)
			b.h.finish(j, Result{}, err)
			continue
		}
		if j.data != nil {
			b.add(j, nil)
			return Stream{Data: *j.data}, mbsha256.Taken
		}
		r := &streamReader{ctx: j.ctx, f: j.f, left: j.f.before.Size, advised: j.ahead}
		b.add(j, r)
		return Stream{R: r}, mbsha256.Taken
	}
}

// waitTick is how often a worker waiting for a batch job checks that one is
// still coming.
const waitTick = 200 * time.Microsecond

// take returns a job another worker handed over, or a queued batch job, or
// nil and what to tell the engine. Before it says Dry it yields once: the
// callers its finished files woke wait to run on this thread, and they
// queue their next files at once.
func (b *batchRun) take(wait bool) (*job, mbsha256.Feed) {
	h := b.h
	for yielded := false; ; {
		select {
		case j := <-b.joined:
			return j, mbsha256.Taken
		case j := <-h.bat:
			h.coming.Add(-1)
			return j, mbsha256.Taken
		default:
		}
		if h.base.Err() != nil {
			return nil, mbsha256.Dry
		}
		if h.coming.Load() <= 0 {
			if yielded {
				return nil, mbsha256.Dry
			}
			runtime.Gosched()
			yielded = true
			continue
		}
		if !wait {
			return nil, mbsha256.Soon
		}
		t := time.NewTimer(waitTick)
		select {
		case j := <-b.joined:
			t.Stop()
			return j, mbsha256.Taken
		case j := <-h.bat:
			t.Stop()
			h.coming.Add(-1)
			return j, mbsha256.Taken
		case <-t.C:
		case <-h.base.Done():
			t.Stop()
		}
	}
}

// finish checks that the engine read stream i to its recorded size and that
// the file's identity held, and answers its caller.
func (b *batchRun) finish(i int, sum [32]byte, err error) {
	e, ok := b.drop(i)
	if !ok {
		return
	}
	b.held.Add(-1)
	j, r := e.j, e.r
	if r == nil { // read and checked by its caller
		if err != nil {
			b.h.finish(j, Result{}, err)
			return
		}
		b.h.finish(j, Result{Digest: append([]byte(nil), sum[:]...), Info: j.before}, nil)
		return
	}
	f := r.f // b.h.finish closes it
	if err == nil && r.left != 0 {
		err = fmt.Errorf("%w: %s: the engine finished the stream with %d of %d bytes unread", errBatchEngine, f.path, r.left, f.before.Size)
	}
	if err == nil {
		err = f.makeDurable(b.h.ro)
	}
	if err == nil {
		err = f.verify()
	}
	if err != nil {
		b.h.finish(j, Result{}, err)
		return
	}
	b.h.finish(j, Result{Digest: append([]byte(nil), sum[:]...), Info: f.before}, nil)
}

// abort answers every job the engine took but did not finish, and the
// first job when the engine never asked for it (an engine called with its
// context done may return at once).
func (b *batchRun) abort(err error) {
	if b.first != nil {
		b.h.finish(b.first, Result{}, err)
		b.first = nil
	}
	for len(b.open) > 0 {
		b.finish(b.open[0].pos, [32]byte{}, err)
	}
}

// claim hands the batch job j, which this worker took from the queue, to a
// running engine with a free lane, and returns nil; or returns the run j
// starts on this worker. A large file (Policy.LargeMin) goes to a running
// engine unless the queue would still fill half of another engine's lanes
// after that one's free lanes: two engines that share a few large files
// run each with half its lanes empty, at up to twice the CPU per byte of
// one with all of them busy (BENCHMARKS.md, large files). The run a large
// file starts is listed at once, so that the next worker's claim sees it.
// Other files start their runs as before (runBatch).
func (h *Hasher) claim(j *job) *batchRun {
	if j.data != nil || j.before.Size < h.p.LargeMin {
		return h.newRun(j)
	}
	h.joinMu.Lock()
	defer h.joinMu.Unlock()
	for _, b := range h.open {
		free := h.lanes - int(b.held.Load()) - len(b.joined)
		if free <= 0 {
			continue
		}
		if rest := 1 + len(h.bat) - free; rest >= max(h.lanes/2, 1) {
			break
		}
		b.joined <- j // never blocks: it holds fewer than lanes
		return nil
	}
	b := h.newRun(j)
	b.listed = true
	h.open = append(h.open, b)
	return b
}

// newRun returns a run whose engine starts with first.
func (h *Hasher) newRun(first *job) *batchRun {
	b := &batchRun{h: h, first: first, joined: make(chan *job, h.lanes)}
	b.held.Store(1)
	return b
}

// openRun lists b as a run that may take jobs handed over (claim).
func (h *Hasher) openRun(b *batchRun) {
	h.joinMu.Lock()
	b.listed = true
	h.open = append(h.open, b)
	h.joinMu.Unlock()
}

// closeRun takes b off the list of runs claim hands jobs to and returns the
// jobs it was handed but did not take.
func (h *Hasher) closeRun(b *batchRun) []*job {
	h.joinMu.Lock()
	defer h.joinMu.Unlock()
	h.open = slices.DeleteFunc(h.open, func(o *batchRun) bool { return o == b })
	var left []*job
	for {
		select {
		case j := <-b.joined:
			left = append(left, j)
		default:
			return left
		}
	}
}
