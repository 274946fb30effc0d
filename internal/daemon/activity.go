package daemon

import (
	"context"
	"sync"
)

// activity wakes the parts that look at the daemon's work from time to
// time while it works: the thread count (diskprocs), the progress log
// and the systemd status line. Each sleeps on it while the daemon rests,
// so an idle daemon has no timer of its own. Whatever starts work, or
// changes what those parts report, tells it.
type activity struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next notify. Take it before
// looking at the state it guards, so that no change is missed.
func (s *activity) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// notify wakes the waiters, if there are any.
func (s *activity) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// relayIndexer tells a.work of each change of the indexer's work until
// ctx ends. It sleeps while the indexer does.
func (a *App) relayIndexer(ctx context.Context) {
	for {
		ch := a.ix.WorkChanged()
		select {
		case <-ch:
			a.work.notify()
		case <-ctx.Done():
			return
		}
	}
}

// resting reports whether nothing runs that reads files in bulk: the
// indexer has no work, no audit run reads (one waiting at a gate does
// not) and no deduplication run asked for through the API goes on.
// Background deduplication is not counted: it reads at a capped rate.
func (a *App) resting() bool {
	if a.ix.Working() || a.dedup.Running() {
		return false
	}
	return !a.audit.Reading()
}

// auditBegan is the audit's OnRun: a run begins, or goes on, to read.
func (a *App) auditBegan() { a.work.notify() }
