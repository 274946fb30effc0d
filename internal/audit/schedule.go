package audit

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// schedule decides when the next scheduled run starts: Every after the
// last pass, within the run windows, after a random jitter, and not while
// paused or switched off. It is woken (poke) when its plan may change.
type schedule struct {
	ws     []window
	every  time.Duration
	jitter time.Duration
	off    bool // Config.Disabled
	wake   chan struct{}

	// guarded by Auditor.mu
	waiting string    // why no run goes on
	nextAt  time.Time // when the scheduler plans the next run
}

func newSchedule(c *Config) schedule {
	ws, _ := parseWindows(c.Windows)
	return schedule{ws: ws, every: c.Every, jitter: c.Jitter, off: c.Disabled, wake: make(chan struct{}, 1)}
}

// Why no scheduled run goes on now (Status.Reason while idle; plan adds
// when it changes).
const (
	whyOff     = "scheduled audits are off"
	whyPaused  = "paused by the user"
	whyGoesOn  = "the pass in progress goes on"
	whyNothing = "nothing to audit yet"
	whyNext    = "the next pass is due"
	whyDue     = "a pass is due"
	whyWindow  = "waiting for the run window"
)

// nothingRecheck is how often the scheduler counts again while the index
// holds nothing to audit.
const nothingRecheck = time.Hour

// scheduled returns when the next scheduled run starts (zero: none is
// planned) and why it is not now, by the state st and the coverage cover.
// Called with Auditor.mu held.
func (s *schedule) scheduled(now time.Time, st *persisted, cover *Coverage) (time.Time, string) {
	switch {
	case s.off:
		return time.Time{}, whyOff
	case st.Paused:
		return time.Time{}, whyPaused
	}
	base, why := now, whyGoesOn
	if st.Pass != nil {
		if t := time.Unix(0, st.NextRun); st.NextRun != 0 && t.After(now) {
			base = t
		}
	} else {
		due, ok := s.due(st, cover)
		if !ok {
			return now.Add(nothingRecheck), whyNothing
		}
		if due.After(now) {
			base, why = due, whyNext
		} else {
			why = whyDue
		}
	}
	at := nextOpen(s.ws, base)
	if at.After(base) {
		why = whyWindow
	}
	return at, why
}

// plan returns when the next scheduled run starts (zero: none is
// planned) and why none runs now, said with how long until then, as the
// scheduler plans it now: the coverage may have changed since its last
// look. Called with Auditor.mu held.
func (s *schedule) plan(now time.Time, st *persisted, cover *Coverage) (time.Time, string) {
	at, why := s.scheduled(now, st, cover)
	switch {
	case why == whyNothing:
		return time.Time{}, why // looked at again within the hour, and when status counts
	case why == s.waiting && !s.nextAt.IsZero():
		at = s.nextAt // the scheduler's own plan, with its random delay
	}
	return at, whyWhen(why, at, now)
}

// whyWhen says why with how long until at, when at is still to come.
func whyWhen(why string, at, now time.Time) string {
	if at.IsZero() || !at.After(now) {
		return why
	}
	in := untilText(at.Sub(now))
	switch why {
	case whyDue:
		return why + "; it begins in " + in + " (a random delay)"
	case whyWindow:
		return why + ", which opens in " + in
	case whyGoesOn:
		return why + " at the next run, in " + in
	}
	return why + " in " + in
}

// untilText is a wait as people say it: "45s", "12m", "3h5m", "2d4h".
func untilText(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	case d < 24*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	d = d.Round(time.Hour)
	days, hours := d/(24*time.Hour), (d%(24*time.Hour))/time.Hour
	if hours == 0 {
		return fmt.Sprintf("%dd", days)
	}
	return fmt.Sprintf("%dd%dh", days, hours)
}

// due returns when the next pass is due: Every after the cutoff of the
// last pass, less the time that pass took (at most half of Every), so each
// file is verified again within Every; before any pass, Every after the
// oldest check. Called with Auditor.mu held.
func (s *schedule) due(st *persisted, cover *Coverage) (time.Time, bool) {
	every := s.every
	if l := st.Last; l != nil {
		lead := min(time.Duration(l.Ended-l.Began), every/2)
		return time.Unix(0, l.Cutoff).Add(every - lead), true
	}
	if cover.Total == 0 {
		return time.Time{}, false
	}
	return cover.Oldest.Add(every), true
}

// nextRunAfter is when a scheduled run that stopped early goes on: at the
// next opening of a run window, or a day after it began when there are no
// windows.
func (s *schedule) nextRunAfter(now, began time.Time) time.Time {
	if len(s.ws) == 0 {
		return began.Add(24 * time.Hour)
	}
	t := now
	if c := closesAt(s.ws, now); inWindows(s.ws, now) && !c.IsZero() {
		t = c
	}
	return nextOpen(s.ws, t)
}

// idle waits for the timer (nil: none) or a wake-up.
func (s *schedule) idle(ctx context.Context, timer *time.Timer, jitterDone *bool) error {
	var fired <-chan time.Time
	if timer != nil {
		fired = timer.C
	}
	select {
	case <-fired:
		if s.jitter <= 0 {
			*jitterDone = true
		}
	case <-s.wake:
		*jitterDone = false
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// poke wakes the scheduler to look at its plan again.
func (s *schedule) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
