package watcher

import (
	"strconv"
	"sync"
)

// published is a root's status as its goroutine last published it
// (root.publish); Status reads it from other goroutines.
type published struct {
	mu     sync.Mutex
	status RootStatus
}

// snapshot is the published status with the inotify limits read now.
func (p *published) snapshot() RootStatus {
	p.mu.Lock()
	s := p.status
	p.mu.Unlock()
	s.MaxUserWatches = maxUserWatches()
	switch {
	case s.NoInstance:
		s.Sysctl = "sysctl fs.inotify.max_user_instances=" + strconv.Itoa(max(2*procInt("max_user_instances"), 256))
	case s.Degraded:
		s.Sysctl = sysctlFor(s.MaxUserWatches, s.Unwatched)
	}
	return s
}

// pending is the published status's Pending.
func (p *published) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status.Pending
}
