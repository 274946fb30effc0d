package audit

import (
	"sync"
	"time"
)

// A pass counts each of its files once. Runs asked for by hand over some
// paths may read a file the pass has decided already, while the pass is
// paused or between its runs: their finding replaces the pass's earlier
// one instead of adding to it, so that a pass never counts more files
// than it holds, nor a rotten file twice.

// passes is the pass accounting: the state saved in the index (the pass
// in progress, the last one, the plan), and the findings the pass in
// progress counted, by path. Guarded by Auditor.mu.
type passes struct {
	state      persisted
	passCounts map[Class]int64  // findings other than ok of the pass in progress
	skip       map[string]Class // paths with an entry of the pass in progress, by the class counted (passCount)
}

// stamps hands out VerifiedAt times, each later than the one before, and
// submits the verifications in that order (see passState.At).
type stamps struct {
	order   sync.Mutex
	lastVer int64
}

// stamp calls fn with the next VerifiedAt time, not after the last, and
// with the order held: fn submits the write of that time.
func (s *stamps) stamp(fn func(t int64)) {
	s.order.Lock()
	defer s.order.Unlock()
	t := max(time.Now().UnixNano(), s.lastVer+1)
	s.lastVer = t
	fn(t)
}

// notBefore makes every time handed out later than t.
func (s *stamps) notBefore(t int64) {
	s.order.Lock()
	s.lastVer = max(s.lastVer, t)
	s.order.Unlock()
}

// passCount counts path's finding c in the pass in progress, in place of
// an earlier finding about it. Called with Auditor.mu held.
func (p *passes) passCount(path string, c Class) {
	p.passUncount(path)
	p.passCounts[c]++
	p.skip[path] = c
}

// moveSkip moves the pass's count of a finding whose entry moved from
// one path to another (book.rehome): its pass counted it under the old.
// Called with Auditor.mu held.
func (p *passes) moveSkip(from, to string) {
	if c, ok := p.skip[from]; ok {
		delete(p.skip, from)
		p.skip[to] = c
	}
}

// passUncount takes back the finding the pass in progress counted about
// path, if any: it was verified ok after all. Called with Auditor.mu held.
func (p *passes) passUncount(path string) {
	old, ok := p.skip[path]
	if !ok {
		return
	}
	delete(p.skip, path)
	if p.passCounts[old]--; p.passCounts[old] <= 0 {
		delete(p.passCounts, old)
	}
}
