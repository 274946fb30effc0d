package indexer

import (
	"context"
	"sync/atomic"

	"github.com/annexd/annexd/watcher"
)

// Source is what the indexer needs of the watcher: its events, how many it
// sent, and how many changes it holds back.
type Source interface {
	Events() <-chan watcher.Event
	Emitted() uint64
	Pending() int
}

// Follow hands src's events to the indexer until their channel is closed or
// ctx ends. Idle counts what src holds and what it sent that Follow has not
// handed over yet; call Follow once.
func (ix *Indexer) Follow(ctx context.Context, src Source) error {
	ix.feed.src.Store(&src)
	for {
		select {
		case ev, ok := <-src.Events():
			if !ok {
				return nil
			}
			ix.Handle(ctx, ev)
			ix.feed.handed(src)
		case <-ctx.Done():
			return nil
		}
	}
}

// feed is the hand-off from the watcher: it counts the events handed over.
type feed struct {
	idle    *signal // told when the last event sent is handed over
	src     atomic.Pointer[Source]
	handled atomic.Uint64
}

// handed counts one event handed over and wakes WaitIdle once the last
// one sent is.
func (f *feed) handed(src Source) {
	if f.handled.Add(1) == src.Emitted() {
		f.idle.notify()
	}
}

// held counts the changes the watcher holds back and the events it sent
// that are not handed over yet. Work flows from the watcher's pending set
// to its sent count to the handed count to the indexer, and each is read
// before the next, so work moving along meanwhile is counted at least once.
func (f *feed) held() int {
	p := f.src.Load()
	if p == nil {
		return 0
	}
	src := *p
	n := src.Pending()
	handled := f.handled.Load() // before Emitted, which only grows
	return n + int(src.Emitted()-handled)
}
