package hasher

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// BatchEngine hashes several SHA-256 streams at once, for example one per
// lane of a multi-buffer SIMD kernel. Each pool worker gets its own engine
// from Policy.Batch and is its only user. An engine must not keep goroutines
// or timers running between calls: an idle Hasher costs no CPU.
type BatchEngine interface {
	// Lanes is how many streams the engine hashes at full speed at once.
	Lanes() int
	// Hash pulls streams from next until it reports false, reads each to
	// its end, and calls done with the stream's position in next's
	// sequence (0, 1, …) and its digest, or the error that ended reading
	// it, as soon as that stream is finished; done is called once per
	// stream taken, on the caller's goroutine. One stream's error must not
	// affect the others. Hash returns ctx.Err() when ctx ends first.
	Hash(ctx context.Context, next func() (io.Reader, bool), done func(i int, sum [32]byte, err error)) error
}

// streamReader reads a stableFile up to its recorded size; a file that ends
// early reads as a *ChangedError, and once its job's context is done every
// read fails with the context's error, so that a cancelled file leaves the
// engine while the others in the batch go on.
type streamReader struct {
	ctx  context.Context
	f    *stableFile
	left int64
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
	n, err := r.f.read(p)
	r.left -= int64(n)
	return n, err
}

// errBatchEngine reports a BatchEngine that broke its contract; the file's
// digest is not used.
var errBatchEngine = errors.New("hasher: batch engine misbehaved")

// batchRun is one call of a worker's engine: the jobs it took, in order.
type batchRun struct {
	h       *Hasher
	first   *job
	jobs    []*job
	streams []*streamReader
	done    []bool
}

// next hands the engine the first job, then any job already queued, without
// waiting; jobs whose file cannot be opened are finished at once.
func (b *batchRun) next() (io.Reader, bool) {
	for {
		j := b.first
		b.first = nil
		if j == nil {
			select {
			case j = <-b.h.bat:
			default:
				return nil, false
			}
		}
		if err := j.ctx.Err(); err != nil {
			b.h.finish(j, Result{}, err)
			continue
		}
		f, err := openStable(j.path, &j.before)
		if err != nil {
			b.h.finish(j, Result{}, err)
			continue
		}
		r := &streamReader{ctx: j.ctx, f: f, left: f.before.Size}
		b.jobs, b.streams, b.done = append(b.jobs, j), append(b.streams, r), append(b.done, false)
		return r, true
	}
}

// finish checks that the engine read stream i to its recorded size and that
// the file's identity held, and answers its caller.
func (b *batchRun) finish(i int, sum [32]byte, err error) {
	if i < 0 || i >= len(b.jobs) || b.done[i] {
		return
	}
	b.done[i] = true
	r := b.streams[i]
	f := r.f
	defer f.close()
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
		b.h.finish(b.jobs[i], Result{}, err)
		return
	}
	b.h.finish(b.jobs[i], Result{Digest: append([]byte(nil), sum[:]...), Info: f.before}, nil)
}

// abort answers every job the engine took but did not finish.
func (b *batchRun) abort(err error) {
	for i := range b.jobs {
		if !b.done[i] {
			b.finish(i, [32]byte{}, err)
		}
	}
}
