// Package gcpace paces the Go collector around the daemon's bulk work. A
// first scan allocates some KiB a file (bbolt's nodes and cursors, the
// hasher's jobs) over a live heap of 20-40 MiB. While Busy says bulk work
// runs, Run sets GOGC to Percent and the soft memory limit to Limit (by
// default GOGC=200 under 128 MiB, so the heap may grow to three times the
// live one); once the work is done, both come back and the freed memory
// goes back to the system, so an idle daemon stays small. The daemon
// keeps GOGC=100 under its 64 MiB soft limit while busy too, and uses Run
// for the return of the memory: the raised pace bought no CPU measurable
// beside it and cost 40-50 MiB of peak RssAnon (BENCHMARKS.md). While no work runs at all (Idle), Run sleeps until
// woken (Wake), so an idle daemon does not wake for it.
package gcpace

import (
	"context"
	"runtime/debug"
	"time"
)

// Defaults of Options.
const (
	DefaultPercent  = 200
	DefaultLimit    = 128 << 20
	DefaultInterval = 50 * time.Millisecond
)

// Options tune Run; zero fields take the defaults.
type Options struct {
	// Busy reports whether bulk work runs now; it is asked every Interval.
	Busy func() bool
	// Percent is GOGC and Limit the soft memory limit, in bytes, while
	// Busy says so; a Limit below the one in force is not applied.
	Percent  int
	Limit    int64
	Interval time.Duration
	// Idle reports whether no work runs or waits, and Wake returns a
	// channel closed when that may change; take it before asking Idle.
	// While Idle says so, Run waits for Wake instead of asking Busy.
	// Nil: Busy is asked every Interval for as long as Run runs.
	Idle func() bool
	Wake func() <-chan struct{}

	setPercent func(int) int     // debug.SetGCPercent; tests replace it
	setLimit   func(int64) int64 // debug.SetMemoryLimit
	free       func()            // debug.FreeOSMemory
}

func (o Options) withDefaults() Options {
	if o.Percent <= 0 {
		o.Percent = DefaultPercent
	}
	if o.Limit <= 0 {
		o.Limit = DefaultLimit
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.setPercent == nil {
		o.setPercent = debug.SetGCPercent
	}
	if o.setLimit == nil {
		o.setLimit = debug.SetMemoryLimit
	}
	if o.free == nil {
		o.free = debug.FreeOSMemory
	}
	return o
}

// pace is what Run changed: the settings to put back.
type pace struct {
	o           Options
	busy        bool
	percent     int
	limit       int64
	limitRaised bool
}

func (p *pace) raise() {
	p.percent = p.o.setPercent(p.o.Percent)
	p.limit = p.o.setLimit(-1) // reads the limit
	p.limitRaised = p.o.Limit > p.limit
	if p.limitRaised {
		p.o.setLimit(p.o.Limit)
	}
	p.busy = true
}

func (p *pace) restore() {
	p.o.setPercent(p.percent)
	if p.limitRaised {
		p.o.setLimit(p.limit)
	}
	p.busy = false
}

// Run asks o.Busy every o.Interval until ctx ends, raises GOGC and the
// memory limit when bulk work starts and sets them back when it ends;
// both are as they were when Run returns. While o.Idle says no work runs,
// it waits for o.Wake instead.
func Run(ctx context.Context, o Options) {
	p := &pace{o: o.withDefaults()}
	t := time.NewTicker(p.o.Interval)
	defer t.Stop()
	defer func() {
		if p.busy {
			p.restore()
		}
	}()
	for {
		if !p.sleep(ctx, t) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		switch now := p.o.Busy(); {
		case now && !p.busy:
			p.raise()
		case !now && p.busy:
			p.restore()
			p.o.free()
		}
	}
}

// sleep waits for o.Wake while o.Idle says no work runs, with t stopped,
// and returns at once otherwise. It reports false when ctx ended.
func (p *pace) sleep(ctx context.Context, t *time.Ticker) bool {
	if p.o.Wake == nil || p.o.Idle == nil || p.busy {
		return true
	}
	wake := p.o.Wake()
	if !p.o.Idle() {
		return true
	}
	t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	}
	t.Reset(p.o.Interval)
	return true
}
