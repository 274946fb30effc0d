package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

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

// damageFilter passes the first log record that carries a store.ErrCorrupt
// and counts the others instead: once a page is damaged every read through
// it fails the same way until the daemon has stopped.
type damageFilter struct {
	slog.Handler
	seen *atomic.Int64
}

func newDamageFilter(h slog.Handler) damageFilter {
	return damageFilter{Handler: h, seen: new(atomic.Int64)}
}

// Handle implements slog.Handler.
func (h damageFilter) Handle(ctx context.Context, r slog.Record) error {
	if carriesDamage(r) && h.seen.Add(1) > 1 {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h damageFilter) WithAttrs(as []slog.Attr) slog.Handler {
	return damageFilter{Handler: h.Handler.WithAttrs(as), seen: h.seen}
}

// WithGroup implements slog.Handler.
func (h damageFilter) WithGroup(name string) slog.Handler {
	return damageFilter{Handler: h.Handler.WithGroup(name), seen: h.seen}
}

// dropped is how many records the filter left out.
func (h damageFilter) dropped() int64 { return max(h.seen.Load()-1, 0) }

func carriesDamage(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && errors.Is(err, store.ErrCorrupt) {
			found = true
		}
		return !found
	})
	return found
}
