package audit

import "time"

// runs are the audit's runs: the one asked for by Start and not begun
// yet, the one in progress, and the last few ended, for WaitRun. Guarded
// by Auditor.mu.
type runs struct {
	pending  *run   // asked for by Start, not begun yet
	run      *run   // in progress
	finished []*run // the last few, for WaitRun
	nextID   uint64
}

// open makes the next run.
func (rs *runs) open(o StartOptions, manual bool) *run {
	rs.nextID++
	return &run{id: rs.nextID, o: o, manual: manual, done: make(chan struct{}), regate: make(chan struct{}, 1),
		attempts: map[string]int{}, seen: map[string]bool{}, left: map[string]leftFile{}}
}

// dropPending ends the run asked for but not begun, as stopped says.
// Called with Auditor.mu held.
func (rs *runs) dropPending(stopped string) {
	r := rs.pending
	if r == nil {
		return
	}
	rs.pending = nil
	r.stopped, r.ended = stopped, time.Now()
	rs.remember(r)
	close(r.done)
}

// remember keeps an ended run for WaitRun, the last 16 of them. Called
// with Auditor.mu held.
func (rs *runs) remember(r *run) {
	rs.finished = append(rs.finished, r)
	if len(rs.finished) > 16 {
		rs.finished = rs.finished[1:]
	}
}

// findRun returns the run id, nil when none is known. Called with
// Auditor.mu held.
func (rs *runs) findRun(id uint64) *run {
	for _, r := range append([]*run{rs.pending, rs.run}, rs.finished...) {
		if r != nil && r.id == id {
			return r
		}
	}
	return nil
}
