package hubcopy

import (
	"context"
	"time"
)

// pacer holds one transfer to a rate in bytes a second. A nil pacer does
// not wait. It lets a transfer catch up on at most a second it spent
// idle, so a stall is no licence for a burst.
type pacer struct {
	rate  int64
	start time.Time
	sent  int64
	now   func() time.Time
}

func newPacer(rate int64) *pacer {
	if rate <= 0 {
		return nil
	}
	return &pacer{rate: rate, start: time.Now(), now: time.Now}
}

// wait blocks until n more bytes fit the rate.
func (p *pacer) wait(ctx context.Context, n int) error {
	if p == nil {
		return nil
	}
	now := p.now()
	if lag := now.Sub(p.due()); lag > time.Second {
		p.start = p.start.Add(lag - time.Second)
	}
	p.sent += int64(n)
	d := p.due().Sub(now)
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

// due is when the bytes sent so far are due at the rate.
func (p *pacer) due() time.Time {
	return p.start.Add(time.Duration(float64(p.sent) / float64(p.rate) * float64(time.Second)))
}
