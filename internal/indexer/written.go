package indexer

import "sync"

// writtenSet holds the paths the watcher reported written whose next check
// has not started yet. Each entry leaves at that check. Past maxWritten
// entries it stops adding and takes every path as written (a hash instead
// of a rename, never the other way) until it has drained.
type writtenSet struct {
	mu   sync.Mutex
	m    map[string]struct{}
	lost bool // full: take reports true until the set is empty again
}

const maxWritten = 1 << 16

func newWrittenSet() *writtenSet { return &writtenSet{m: make(map[string]struct{})} }

func (s *writtenSet) add(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxWritten {
		s.lost = true
		return
	}
	s.m[path] = struct{}{}
}

// take reports whether path was reported written since its last check and
// forgets it.
func (s *writtenSet) take(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[path]
	delete(s.m, path)
	lost := s.lost
	if len(s.m) == 0 {
		s.lost = false
	}
	return ok || lost
}

// has reports whether path was reported written and not yet checked.
func (s *writtenSet) has(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[path]
	return ok || s.lost
}
