package store

import (
	"context"
	"sync"
	"sync/atomic"
)

// SubmitAll submits cs in order and waits until every change is made or ctx
// ends. It returns the first error. The changes may be committed in more
// than one group.
func (s *Store) SubmitAll(ctx context.Context, cs []Change) error {
	items := make([]item, len(cs))
	for i, c := range cs {
		items[i].c = c
	}
	return s.waitAll(ctx, items)
}

// waitAll submits items and waits for them; it keeps the first error.
func (s *Store) waitAll(ctx context.Context, items []item) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, it := range items {
		wg.Add(1)
		it.waited = true
		it.done = func(err error) {
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
			wg.Done()
		}
		s.submit(it)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return first
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sweep removes the records at or below dir whose generation is below gen
// and that keep (if not nil) does not claim: files a complete scan of
// generation gen did not see. A record marked or put again meanwhile is
// kept, since each removal checks the generation when it is applied. keep
// is called outside any transaction. Sweep returns how many it removed.
func (s *Store) Sweep(ctx context.Context, dir []byte, gen uint64, keep func(path []byte, r *Record) bool) (int, error) {
	return s.sweep(ctx, dir, gen, keep, nil)
}

// SweepFenced is Sweep behind a sweep fence on dir (fence.go), raised
// before the first record is read: a delete is skipped when its path, or a
// directory above it, was touched since by a change that brings a record
// or by Saw. keep is called after the fence is up, so it may look at the
// file system: a record keep let go because its file was gone is spared
// when anything brought the file back before the delete.
func (s *Store) SweepFenced(ctx context.Context, dir []byte, gen uint64, keep func(path []byte, r *Record) bool) (int, error) {
	f := s.fenceSet.raise(&Fence{path: string(dir), set: &s.fenceSet, sweep: true})
	n, err := s.sweep(ctx, dir, gen, keep, f)
	if err != nil {
		f.abandon() // deletes may still be queued
		return n, err
	}
	f.Lift()
	if f.overflowed() {
		s.log.Warn("store: more changes under a swept directory than its fence remembers; its stale records stay until the next scan",
			"dir", string(dir), "remembered", maxTouched)
	}
	return n, nil
}

func (s *Store) sweep(ctx context.Context, dir []byte, gen uint64, keep func(path []byte, r *Record) bool, f *Fence) (int, error) {
	var (
		removed atomic.Int64
		stale   []item
	)
	flush := func() error {
		err := s.waitAll(ctx, stale)
		stale = stale[:0]
		return err
	}
	err := s.Subtree(ctx, dir, func(path []byte, r Record) error {
		if r.Generation >= gen || (keep != nil && keep(path, &r)) {
			return nil
		}
		stale = append(stale, item{c: Change{Op: OpDeleteIfOlder, Path: path, Gen: gen, Fence: f}, removed: &removed})
		if len(stale) < chunk {
			return nil
		}
		return flush()
	})
	if err == nil {
		err = flush()
	}
	return int(removed.Load()), err
}
