package watcher

import (
	"context"
	"sync"
	"sync/atomic"
)

// firstSetup follows a root's first set-up of its watches, for
// Watcher.WaitWatched: which directories it has tried to watch so far, and
// whether it is over. Directories the set-up never tries (under one that
// got no watch, or made after their parent was read) are waited for until
// it is over.
type firstSetup struct {
	over   atomic.Bool
	overCh chan struct{} // closed when over

	mu      sync.Mutex
	tried   map[string]struct{}
	wake    chan struct{} // closed and replaced when a waiter may go on
	waiting bool          // someone waits on wake
}

func newFirstSetup() *firstSetup {
	return &firstSetup{tried: make(map[string]struct{}), wake: make(chan struct{}), overCh: make(chan struct{})}
}

// done notes that the set-up tried to watch dir: it has its watch, or it
// has none for a reason the watcher knows (Watcher.WaitWatched lists them).
func (s *firstSetup) done(dir string) {
	if s.over.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tried == nil {
		return
	}
	s.tried[dir] = struct{}{}
	s.wakeLocked()
}

// finish ends the set-up: every waiter goes on, and later waits return at
// once.
func (s *firstSetup) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over.Load() {
		return
	}
	s.over.Store(true)
	close(s.overCh)
	s.tried = nil
	s.waiting = true
	s.wakeLocked()
}

func (s *firstSetup) wakeLocked() {
	if s.waiting {
		close(s.wake)
		s.wake = make(chan struct{})
		s.waiting = false
	}
}

// wait returns once the set-up tried dir or is over, or ctx's error.
func (s *firstSetup) wait(ctx context.Context, dir string) error {
	for !s.over.Load() {
		s.mu.Lock()
		if _, ok := s.tried[dir]; ok || s.tried == nil {
			s.mu.Unlock()
			return nil
		}
		s.waiting = true
		wake := s.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
