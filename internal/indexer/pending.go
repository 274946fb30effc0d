package indexer

import (
	"slices"
	"sync"
)

// pendingSet holds the paths in the pipeline: queued, being checked or
// hashed, waiting for a retry, or waiting for their write to be durable. A
// path is in it at most once; its size is bounded by the queue, the workers,
// the writes in flight and the retries.
type pendingSet struct {
	mu    sync.Mutex
	m     map[string]*pendingEntry
	bytes int64  // sum of the entries' sizes
	began func() // called when a path enters the empty set
}

type pendingEntry struct {
	again      bool          // another check was asked for while in the pipeline
	againScans []*scan       // scans that saw the path meanwhile
	size       int64         // bytes expected to be hashed, for progress
	rehash     bool          // hash at the next check even if the record looks current
	via        []string      // other names of the file's inode written meanwhile (addVia)
	done       chan struct{} // closed when the path leaves; nil until someone waits
}

// newPendingSet returns an empty set that calls began when a path enters
// it empty.
func newPendingSet(began func()) *pendingSet {
	return &pendingSet{m: make(map[string]*pendingEntry), began: began}
}

// add puts path in the set and reports true, or, when it is already there,
// asks for one more check afterwards (on behalf of sc, if not nil) and
// reports false.
func (p *pendingSet) add(path string, sc *scan, size int64) bool {
	return p.addEntry(path, sc, size) != nil
}

// addEntry is add returning the new entry, nil when path was there: a job
// that keeps it sets its size without a look-up (setEntrySize).
func (p *pendingSet) addEntry(path string, sc *scan, size int64) *pendingEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.m[path]; ok {
		e.again = true
		if sc != nil {
			sc.wg.Add(1)
			e.againScans = append(e.againScans, sc)
		}
		return nil
	}
	return p.insert(path, size)
}

// insert makes path's entry. Called with p.mu held.
func (p *pendingSet) insert(path string, size int64) *pendingEntry {
	if len(p.m) == 0 {
		p.began()
	}
	e := &pendingEntry{size: size}
	p.m[path] = e
	p.bytes += size
	return e
}

// addNew puts path in the set and returns its new entry, or returns nil
// when it is there already, asking for nothing more.
func (p *pendingSet) addNew(path string, size int64) *pendingEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.m[path]; ok {
		return nil
	}
	return p.insert(path, size)
}

// addRehash is add, and marks path to be hashed at its next check even
// when its record looks current.
func (p *pendingSet) addRehash(path string) bool {
	fresh := p.add(path, nil, 0)
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.m[path]; ok {
		e.rehash = true
	}
	return fresh
}

// maxVia bounds the names addVia keeps for one path.
const maxVia = 8

// addVia is add for a name of an inode written through via, another of
// its names. Until path leaves the set, its checks ask the ledger about
// via too (viaOf), even once via's record is gone.
func (p *pendingSet) addVia(path, via string) bool {
	fresh := p.add(path, nil, 0)
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.m[path]; ok && len(e.via) < maxVia && !slices.Contains(e.via, via) {
		e.via = append(e.via, via)
	}
	return fresh
}

// viaOf returns the names addVia gave path while it is in the set.
func (p *pendingSet) viaOf(path string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.m[path]; ok {
		return slices.Clone(e.via)
	}
	return nil
}

// takeRehash reports whether path was marked by addRehash since its last
// check, and clears the mark; e is the path's entry when its job kept it,
// as for setSize.
func (p *pendingSet) takeRehash(path string, e *pendingEntry) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e == nil {
		e = p.m[path]
	}
	if e == nil || !e.rehash {
		return false
	}
	e.rehash = false
	return true
}

// release takes path out of the set, unless another check was asked for:
// then it stays, the flag is cleared, and release returns true with the
// scans that must be told about the next check and the path's size, which
// that check counts for them once settled. left is how many paths the set
// holds now.
func (p *pendingSet) release(path string) (again bool, scans []*scan, size int64, left int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.m[path]
	if !ok {
		return false, nil, 0, len(p.m)
	}
	if e.again {
		e.again = false
		scans, e.againScans = e.againScans, nil
		return true, scans, e.size, len(p.m)
	}
	delete(p.m, path)
	p.bytes -= e.size
	if e.done != nil {
		close(e.done)
	}
	return false, nil, 0, len(p.m)
}

// takeScans returns the scans that asked for one more check of path while
// it was in the pipeline, and forgets them; the check itself stays asked
// for. e is the path's entry when its job kept it, else nil.
func (p *pendingSet) takeScans(path string, e *pendingEntry) []*scan {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e == nil {
		e = p.m[path]
	}
	if e == nil {
		return nil
	}
	scans := e.againScans
	e.againScans = nil
	return scans
}

// has reports whether path is in the pipeline.
func (p *pendingSet) has(path string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.m[path]
	return ok
}

// wait returns a channel closed when path leaves the set, or nil when it is
// not in it.
func (p *pendingSet) wait(path string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.m[path]
	if !ok {
		return nil
	}
	if e.done == nil {
		e.done = make(chan struct{})
	}
	return e.done
}

// stats returns the number of paths and the bytes they are expected to need.
func (p *pendingSet) stats() (n int, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m), p.bytes
}

// setSize records the size of a path once it is known; e is the path's
// entry when its job kept it (it stays the path's until the job's finish
// releases it), else nil.
func (p *pendingSet) setSize(path string, e *pendingEntry, size int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e == nil {
		if e = p.m[path]; e == nil {
			return
		}
	}
	p.bytes += size - e.size
	e.size = size
}
