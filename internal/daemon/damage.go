package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/annexd/annexd/store"
)

// watchDamage returns an error once a read or a write met damage in the
// index. The error ends the daemon's errgroup, so a damaged index is
// neither served nor written (the store refuses writes from then on).
func (a *App) watchDamage(ctx context.Context) error {
	select {
	case <-a.st.Damaged():
		return fmt.Errorf("daemon: %w", a.st.Damage())
	case <-ctx.Done():
		return nil
	}
}

// repeatFilter passes the first log record that carries one of its
// errors, then one every repeatWindow, and counts the others instead: once
// a page is damaged, or the index's file system is full, every write (or
// read) meets the same error until the cause is gone, and one line says
// it. A record passed after others were left out says how many.
type repeatFilter struct {
	slog.Handler
	kinds []*repeats
}

// repeatWindow is how often a record of one kind passes while it repeats.
const repeatWindow = 5 * time.Minute

// repeats counts the records carrying one error.
type repeats struct {
	err     error
	mu      sync.Mutex
	last    time.Time // when the last one passed
	since   int64     // left out since then
	dropped int64     // left out in all
}

func newRepeatFilter(h slog.Handler) repeatFilter {
	return repeatFilter{Handler: h, kinds: []*repeats{{err: store.ErrCorrupt}, {err: store.ErrNoSpace}}}
}

// Handle implements slog.Handler.
func (h repeatFilter) Handle(ctx context.Context, r slog.Record) error {
	k := h.kind(r)
	if k == nil {
		return h.Handler.Handle(ctx, r)
	}
	k.mu.Lock()
	pass := k.last.IsZero() || time.Since(k.last) >= repeatWindow
	n := k.since
	if pass {
		k.last, k.since = time.Now(), 0
	} else {
		k.since++
		k.dropped++
	}
	k.mu.Unlock()
	if !pass {
		return nil
	}
	if n > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int64("repeats_not_logged", n))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h repeatFilter) WithAttrs(as []slog.Attr) slog.Handler {
	return repeatFilter{Handler: h.Handler.WithAttrs(as), kinds: h.kinds}
}

// WithGroup implements slog.Handler.
func (h repeatFilter) WithGroup(name string) slog.Handler {
	return repeatFilter{Handler: h.Handler.WithGroup(name), kinds: h.kinds}
}

// dropped is how many records carrying target the filter left out.
func (h repeatFilter) dropped(target error) int64 {
	for _, k := range h.kinds {
		if k.err == target {
			k.mu.Lock()
			defer k.mu.Unlock()
			return k.dropped
		}
	}
	return 0
}

// kind returns the counter of the error r carries, or nil.
func (h repeatFilter) kind(r slog.Record) *repeats {
	var found *repeats
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok {
			for _, k := range h.kinds {
				if errors.Is(err, k.err) {
					found = k
				}
			}
		}
		return found == nil
	})
	return found
}
