package hasher

import (
	"context"

	"github.com/annexd/annexd/hasher/mbsha256"
)

// MultiBuffer is a Policy.Batch factory: each pool worker gets a
// multi-buffer SHA-256 engine (package mbsha256) with the fastest kernel this
// CPU has, which hashes the queued large files in parallel SIMD lanes and
// refills a lane as soon as its file is done. It starts no goroutine.
func MultiBuffer() BatchEngine { return multiBuffer{mbsha256.New()} }

type multiBuffer struct{ e *mbsha256.Engine }

func (m multiBuffer) Lanes() int { return m.e.Lanes() }

func (m multiBuffer) Hash(ctx context.Context, next func(bool) (Stream, mbsha256.Feed), done func(int, [32]byte, error)) error {
	return m.e.HashFeed(ctx, func(wait bool) (mbsha256.Input, mbsha256.Feed) {
		s, f := next(wait)
		return mbsha256.Input{Data: s.Data, R: s.R}, f
	}, func(i int, r mbsha256.Result) { done(i, r.Sum, r.Err) })
}

// multiBufferKernel is a Policy.Batch factory for the named kernel.
func multiBufferKernel(name string) func() BatchEngine {
	return func() BatchEngine {
		e, err := mbsha256.NewKernel(name)
		if err != nil {
			e = mbsha256.New()
		}
		return multiBuffer{e}
	}
}

// validKernel reports whether this machine runs the named kernel.
func validKernel(name string) bool {
	for _, k := range mbsha256.Kernels() {
		if k == name {
			return true
		}
	}
	return false
}

// StreamLanes returns the lanes of a new engine of the policy's batch
// kernel, for a caller that reads large SHA-256 files itself and hands
// their chunks over (the audit, which reads the device directly); nil
// when the policy has no multi-lane engine. The caller closes them.
func (h *Hasher) StreamLanes() *mbsha256.Lanes {
	if h.p.Batch == nil {
		return nil
	}
	m, ok := h.p.Batch().(multiBuffer)
	if !ok {
		return nil
	}
	l, err := mbsha256.NewLanes(m.e)
	if err != nil || l.Width() < 2 {
		return nil
	}
	return l
}
