// Package logrepeat keeps a repeating error from flooding the log: a
// slog handler passes the first record that carries one of its errors,
// then one every few minutes, and counts the others, which the next
// record passed reports. Once a page of the index is damaged, or its file
// system is full, every read or write meets the same error until the
// cause is gone; one line says it.
package logrepeat

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Filter passes the first log record that carries one of its
// errors, then one every repeatWindow, and counts the others instead: once
// a page is damaged, or the index's file system is full, every write (or
// read) meets the same error until the cause is gone, and one line says
// it. A record passed after others were left out says how many.
type Filter struct {
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

// New passes h the records that carry none of errs, and of those that
// carry one, the first and then one every repeatWindow.
func New(h slog.Handler, errs ...error) Filter {
	f := Filter{Handler: h}
	for _, err := range errs {
		f.kinds = append(f.kinds, &repeats{err: err})
	}
	return f
}

// Handle implements slog.Handler.
func (h Filter) Handle(ctx context.Context, r slog.Record) error {
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
func (h Filter) WithAttrs(as []slog.Attr) slog.Handler {
	return Filter{Handler: h.Handler.WithAttrs(as), kinds: h.kinds}
}

// WithGroup implements slog.Handler.
func (h Filter) WithGroup(name string) slog.Handler {
	return Filter{Handler: h.Handler.WithGroup(name), kinds: h.kinds}
}

// Dropped is how many records carrying target the filter left out.
func (h Filter) Dropped(target error) int64 {
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
func (h Filter) kind(r slog.Record) *repeats {
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
