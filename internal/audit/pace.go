package audit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// pacer is a token bucket shared by the readers of a run: it lets rate
// bytes a second through on average and at most burst bytes at once.
// A read takes its tokens before it starts and may leave the bucket in
// debt; the next read then waits until the debt is paid, so the rate
// holds over any stretch longer than one read. A nil pacer, or one of no
// rate, never waits. The pacer also adds up the time its readers spend in
// reads, for the pressure gate.
type pacer struct {
	mu     sync.Mutex
	rate   float64 // bytes per second; 0: no cap
	burst  float64
	tokens float64
	last   time.Time
	// inReads adds up the readers' time in read calls: their own waits
	// for I/O, which the pressure gate leaves out. Nil: not kept.
	inReads *atomic.Int64
}

// newPacer returns a pacer for rate bytes a second, or nil for rate <= 0.
// The burst is a tenth of a second's worth: a read larger than that goes
// into debt, which the next read waits for.
func newPacer(rate int64) *pacer {
	if rate <= 0 {
		return nil
	}
	burst := float64(rate) / 10
	return &pacer{rate: float64(rate), burst: burst, tokens: burst, last: time.Now()}
}

// wait takes n tokens, sleeping until the bucket can pay them or ctx ends.
func (p *pacer) wait(ctx context.Context, n int) error {
	if p == nil || p.rate <= 0 {
		return nil
	}
	d := p.reserve(time.Now(), n)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// read counts d spent in one read call.
func (p *pacer) read(d time.Duration) {
	if p != nil && p.inReads != nil {
		p.inReads.Add(int64(d))
	}
}

// reserve takes n tokens at now and returns how long to wait for them.
func (p *pacer) reserve(now time.Time, n int) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if el := now.Sub(p.last).Seconds(); el > 0 {
		p.tokens = min(p.burst, p.tokens+el*p.rate)
		p.last = now
	}
	p.tokens -= float64(n)
	if p.tokens >= 0 {
		return 0
	}
	return time.Duration(-p.tokens / p.rate * float64(time.Second))
}
