package store

import (
	"sync"
	"sync/atomic"
)

// epoch versions the directory mappings (directory key ↔ id) so readers
// can cache them across transactions. It works like a seqlock: the writer
// makes it odd before a transaction that renames or removes a directory
// changes anything, and even again after the transaction ended (committed
// or not). A reader reads it before and after beginning its transaction;
// when both reads agree and are even, no directory change was committed
// or in flight in between, so what the transaction shows matches the cache
// of that epoch.
type epoch struct {
	v        atomic.Uint64
	changing bool // writer goroutine only
}

// begin is called by the writer before it changes a directory mapping.
func (e *epoch) begin() {
	if !e.changing {
		e.changing = true
		e.v.Add(1)
	}
}

// end is called by the writer after each transaction.
func (e *epoch) end() {
	if e.changing {
		e.changing = false
		e.v.Add(1)
	}
}

func (e *epoch) load() uint64 { return e.v.Load() }

// stable reports whether a transaction begun between the reads before and
// after may use and fill the caches of epoch before.
func stable(before, after uint64) bool { return before == after && before%2 == 0 }

// dirIDCache maps directory keys to ids for Get, for one epoch at a time.
type dirIDCache struct {
	mu    sync.RWMutex
	epoch uint64
	m     map[string]uint64
}

const maxDirIDCache = 1 << 16

func (c *dirIDCache) get(e uint64, dk []byte) (uint64, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.epoch != e {
		return 0, false
	}
	id, ok := c.m[string(dk)]
	return id, ok
}

func (c *dirIDCache) put(e uint64, dk []byte, id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case e < c.epoch:
		return // a newer epoch owns the cache
	case e > c.epoch || c.m == nil || len(c.m) >= maxDirIDCache:
		c.epoch, c.m = e, make(map[string]uint64)
	}
	c.m[string(dk)] = id
}
