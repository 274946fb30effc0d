package indexer

import (
	"context"
	"sync"
	"time"
)

// maxRemovals bounds the removals waiting for their delay; beyond it the
// oldest is handled at once (a mass deletion must not grow memory).
const maxRemovals = 8192

// removals holds paths reported removed until their delay has passed. The
// delay is the same for all, so the list is in due order.
type removals struct {
	delay  time.Duration
	idle   *signal // told when the first removal waits, and when the last is in the pipeline
	mu     sync.Mutex
	items  []removal
	taken  int // returned by due and not yet in the pipeline (see done)
	signal chan struct{}
}

type removal struct {
	path string
	due  time.Time
}

func newRemovals(delay time.Duration, idle *signal) *removals {
	return &removals{delay: delay, idle: idle, signal: make(chan struct{}, 1)}
}

// add appends path. When the list is full it returns the oldest path, to be
// handled now.
func (r *removals) add(path string) (string, bool) {
	r.mu.Lock()
	first := len(r.items)+r.taken == 0
	r.items = append(r.items, removal{path: path, due: time.Now().Add(r.delay)})
	var over string
	var ok bool
	if len(r.items) > maxRemovals {
		over, ok = r.items[0].path, true
		r.items = r.items[1:]
		r.taken++
	}
	r.mu.Unlock()
	if first {
		r.idle.notify()
	}
	select {
	case r.signal <- struct{}{}:
	default:
	}
	return over, ok
}

// due pops the paths whose delay has passed and returns when the next one
// is due (zero when none is waiting). Each path, like one returned by add,
// counts in len until done is called for it.
func (r *removals) due(now time.Time) ([]string, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for len(r.items) > 0 && !r.items[0].due.After(now) {
		out = append(out, r.items[0].path)
		r.items = r.items[1:]
	}
	r.taken += len(out)
	if len(r.items) == 0 {
		r.items = nil
		return out, time.Time{}
	}
	return out, r.items[0].due
}

func (r *removals) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.items) + r.taken
}

// done tells that one path returned by due is in the pipeline now: until
// then len counts it, so a Progress, which reads the removals before the
// queue, never sees it in neither.
func (r *removals) done() {
	r.mu.Lock()
	r.taken--
	empty := len(r.items)+r.taken == 0
	r.mu.Unlock()
	if empty {
		r.idle.notify()
	}
}

// later drops the records at and under path after the delay, if path is
// gone then. When the list is full, the oldest path goes to p now.
func (r *removals) later(ctx context.Context, p *pipeline, path string) {
	if over, ok := r.add(path); ok {
		p.enqueue(ctx, job{path: over}, nil, 0)
		r.done()
	}
}

// run hands due removals to p's workers, which drop the records if the
// path is still gone, until ctx ends.
func (r *removals) run(ctx context.Context, p *pipeline) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		paths, next := r.due(time.Now())
		for _, path := range paths {
			p.enqueue(ctx, job{path: path}, nil, 0)
			r.done()
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-r.signal:
		case <-timer.C:
		}
	}
}
