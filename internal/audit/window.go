package audit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// window is a weekly time range: the days it starts on and its minutes of
// the day. An end before the start runs past midnight into the next day.
type window struct {
	days       [7]bool // indexed by time.Weekday
	start, end int     // minutes since midnight; end may be 24*60
}

var dayNames = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday,
	"wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

// parseWindows parses Config.Windows.
func parseWindows(specs []string) ([]window, error) {
	var out []window
	for _, s := range specs {
		w, err := parseWindow(s)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// parseWindow parses "[DAYS ]HH:MM-HH:MM"; DAYS is a comma list of day
// names or ranges ("mon-fri,sun").
func parseWindow(s string) (window, error) {
	var w window
	f := strings.Fields(strings.ToLower(s))
	bad := func(why string) (window, error) {
		return window{}, fmt.Errorf("%w: run window %q: %s (want e.g. \"mon-fri 01:00-06:00\")", ErrConfig, s, why)
	}
	switch len(f) {
	case 1:
		for d := range w.days {
			w.days[d] = true
		}
	case 2:
		for _, part := range strings.Split(f[0], ",") {
			a, b, isRange := strings.Cut(part, "-")
			from, ok1 := dayNames[a]
			to, ok2 := dayNames[b]
			if !isRange {
				to, ok2 = from, ok1
			}
			if !ok1 || !ok2 {
				return bad("unknown day " + part)
			}
			for d := from; ; d = (d + 1) % 7 {
				w.days[d] = true
				if d == to {
					break
				}
			}
		}
		f = f[1:]
	default:
		return bad("expected days and a time range")
	}
	a, b, ok := strings.Cut(f[0], "-")
	if !ok {
		return bad("no time range")
	}
	var err1, err2 error
	w.start, err1 = parseClock(a)
	w.end, err2 = parseClock(b)
	switch {
	case err1 != nil || err2 != nil:
		return bad("times are HH:MM, 00:00 to 24:00")
	case w.start == w.end || w.start == 24*60:
		return bad("empty time range")
	}
	return w, nil
}

func parseClock(s string) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	// hh is bounded before it is multiplied: a huge hour must not wrap.
	if !ok || err1 != nil || err2 != nil || hh < 0 || hh > 24 || mm < 0 || mm > 59 || hh*60+mm > 24*60 {
		return 0, fmt.Errorf("bad time %q", s)
	}
	return hh*60 + mm, nil
}

// contains reports whether the local time t lies in w.
func (w *window) contains(t time.Time) bool {
	d, m := t.Weekday(), t.Hour()*60+t.Minute()
	if w.start < w.end {
		return w.days[d] && m >= w.start && m < w.end
	}
	return (w.days[d] && m >= w.start) || (w.days[(d+6)%7] && m < w.end)
}

// inWindows reports whether t lies in one of ws; no windows is any time.
func inWindows(ws []window, t time.Time) bool {
	if len(ws) == 0 {
		return true
	}
	for i := range ws {
		if ws[i].contains(t) {
			return true
		}
	}
	return false
}

// weekMinutes bounds the searches below: every window recurs within a
// week (eight days, for a daylight-saving shift).
const weekMinutes = 8 * 24 * 60

// nextOpen returns the first time from t on that lies in a window: t when
// it does, else the start of the next minute that does; zero when no
// window ever opens.
func nextOpen(ws []window, t time.Time) time.Time {
	if inWindows(ws, t) {
		return t
	}
	m := t.Truncate(time.Minute)
	for range weekMinutes {
		m = m.Add(time.Minute)
		if inWindows(ws, m) {
			return m
		}
	}
	return time.Time{}
}

// closesAt returns when the window that holds t ends, zero when there are
// no windows (never).
func closesAt(ws []window, t time.Time) time.Time {
	if len(ws) == 0 {
		return time.Time{}
	}
	m := t.Truncate(time.Minute)
	for range weekMinutes {
		m = m.Add(time.Minute)
		if !inWindows(ws, m) {
			return m
		}
	}
	return time.Time{}
}
