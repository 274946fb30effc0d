package store

import (
	"errors"
	"sync"
)

// damage latches the first sign that the index is damaged: a page or an
// entry that does not decode, met by a read or a write. Its zero value is
// ready to use.
type damage struct {
	mu  sync.Mutex
	ch  chan struct{} // closed once err is set
	err error
}

// note latches err when it is an ErrCorrupt and nothing was latched yet.
func (d *damage) note(err error) {
	if err == nil || !errors.Is(err, ErrCorrupt) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return
	}
	d.err = err
	if d.ch == nil {
		d.ch = make(chan struct{})
	}
	close(d.ch)
}

func (d *damage) done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ch == nil {
		d.ch = make(chan struct{})
	}
	return d.ch
}

func (d *damage) get() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// Damaged returns a channel that is closed once a read or a write met a
// damaged page or entry. From then on the store refuses every write, so
// the damaged file is left as it was found; Damage says what was met.
func (s *reader) Damaged() <-chan struct{} { return s.dmg.done() }

// Damage returns the first ErrCorrupt a read or a write met, or nil.
func (s *reader) Damage() error { return s.dmg.get() }
