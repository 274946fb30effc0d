package watcher

import "time"

// overflows is a root's overflow Rescan: when one is due, and the backoff
// that keeps a storm of overflows from causing endless recrawls. The root's
// goroutine owns it.
type overflows struct {
	pending   bool      // an overflow Rescan is scheduled
	due       time.Time // ... for then
	rescanned time.Time // last overflow Rescan emitted
	backoff   time.Duration
	count     int       // overflows seen
	last      time.Time // the last overflow seen
}

// note records an overflow at now and schedules one Rescan of the root,
// no sooner than the backoff after the previous one; an overflow while
// one is scheduled joins it. It reports the Rescan's due time and whether
// this overflow scheduled it.
func (o *overflows) note(now time.Time, opts *Options) (time.Time, bool) {
	o.count++
	o.last = now
	if o.pending {
		return o.due, false
	}
	if !o.rescanned.IsZero() && now.Sub(o.rescanned) < 2*o.backoff {
		o.backoff = min(2*o.backoff, opts.MaxOverflowBackoff)
	} else if !o.rescanned.IsZero() {
		o.backoff = opts.OverflowBackoff
	}
	due := now.Add(opts.Quiet)
	if !o.rescanned.IsZero() {
		if next := o.rescanned.Add(o.backoff); next.After(due) {
			due = next
		}
	}
	o.pending, o.due = true, due
	return due, true
}

// take reports whether the scheduled Rescan is due at now; if so, it is
// no longer scheduled and counts as emitted at now.
func (o *overflows) take(now time.Time) bool {
	if !o.pending || now.Before(o.due) {
		return false
	}
	o.pending = false
	o.rescanned = now
	return true
}
