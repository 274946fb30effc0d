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

// repeatFilter passes the first log record that carries one of its
// errors and counts the others instead: once a page is damaged, or the
// index's file system is full, every write (or read) meets the same error
// until the cause is gone, and one line says it.
type repeatFilter struct {
	slog.Handler
	errs []error         // store.ErrCorrupt, store.ErrNoSpace
	seen []*atomic.Int64 // records carrying errs[i]
}

func newRepeatFilter(h slog.Handler) repeatFilter {
	f := repeatFilter{Handler: h, errs: []error{store.ErrCorrupt, store.ErrNoSpace}}
	for range f.errs {
		f.seen = append(f.seen, new(atomic.Int64))
	}
	return f
}

// Handle implements slog.Handler.
func (h repeatFilter) Handle(ctx context.Context, r slog.Record) error {
	if i := h.carries(r); i >= 0 && h.seen[i].Add(1) > 1 {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h repeatFilter) WithAttrs(as []slog.Attr) slog.Handler {
	return repeatFilter{Handler: h.Handler.WithAttrs(as), errs: h.errs, seen: h.seen}
}

// WithGroup implements slog.Handler.
func (h repeatFilter) WithGroup(name string) slog.Handler {
	return repeatFilter{Handler: h.Handler.WithGroup(name), errs: h.errs, seen: h.seen}
}

// dropped is how many records carrying target the filter left out.
func (h repeatFilter) dropped(target error) int64 {
	for i, e := range h.errs {
		if e == target {
			return max(h.seen[i].Load()-1, 0)
		}
	}
	return 0
}

// carries returns the index in h.errs of the error r carries, or -1.
func (h repeatFilter) carries(r slog.Record) int {
	found := -1
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok {
			for i, e := range h.errs {
				if errors.Is(err, e) {
					found = i
				}
			}
		}
		return found < 0
	})
	return found
}
