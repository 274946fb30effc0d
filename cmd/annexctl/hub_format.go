package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/annexd/annexd/api"
)

// appendContent formats one content of a hub answer for people: a header
// line (size, hosts, key), then its holders.
func appendContent(buf []byte, c api.HubContent, sep bool, size func(int64) string) []byte {
	if sep {
		buf = append(buf, '\n')
	}
	buf = fmt.Appendf(buf, "%s on %d %s", size(c.Size), len(c.Holders), plural(int64(len(c.Holders)), "host", "hosts"))
	if f := c.Fresh(); f < len(c.Holders) {
		buf = fmt.Appendf(buf, " (%d fresh)", f)
	}
	buf = fmt.Appendf(buf, "  %s\n", c.Key())
	return appendHolders(buf, c.Holders, "  ", time.Now())
}

// appendHolders lists each host, when it was last heard from, whether it
// is stale or resending its index, then its paths, indented.
func appendHolders(buf []byte, hs []api.HubHolder, indent string, now time.Time) []byte {
	for _, h := range hs {
		buf = fmt.Appendf(buf, "%s%s  last seen %s", indent, h.Host, ago(h.LastSeen, now))
		switch {
		case h.Stale:
			buf = append(buf, "  STALE (not counted as a copy)"...)
		case h.Unconfirmed >= h.Count && h.Count > 0:
			buf = append(buf, "  RESENDING its index: none of these paths confirmed yet (not counted as a copy)"...)
		case h.Unconfirmed > 0:
			buf = fmt.Appendf(buf, "  RESENDING its index: %s of these paths not confirmed yet", groupDigits(h.Unconfirmed))
		}
		buf = append(buf, '\n')
		for _, p := range h.Paths {
			buf = append(append(append(buf, indent...), "  "...), p...)
			buf = append(buf, '\n')
		}
		if more := h.Count - int64(len(h.Paths)); more > 0 {
			buf = fmt.Appendf(buf, "%s  … and %s more %s\n", indent, groupDigits(more), plural(more, "path", "paths"))
		}
	}
	return buf
}

// ago says how long before now t was, roughly: "12s ago", "3 days ago".
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d days ago (%s)", int(d.Hours()/24), t.Local().Format("2006-01-02 15:04"))
}

// hubFailure turns a failed hub query into the exit status the user sees.
func hubFailure(c *api.Client, what string, err error) error {
	switch {
	case errors.Is(err, api.ErrNoHub):
		return &exitError{Code: exitFailure, Err: fmt.Errorf("%s: this annexd has no hub: set [publish] hub (or run the hub: [hub] enabled) in its config", what)}
	case errors.Is(err, api.ErrHubUnreachable):
		return &exitError{Code: exitFailure, Err: fmt.Errorf("%s: %s", what, strings.TrimPrefix(statusText(err), "api: "))}
	}
	var se *api.StatusError
	if errors.As(err, &se) && se.Status >= 400 && se.Status < 500 {
		return &exitError{Code: exitFailure, Err: fmt.Errorf("%s: %s", what, strings.TrimPrefix(se.Message, "api: "))}
	}
	return apiFailure(c, err)
}

// statusText is the daemon's message in err, or err itself.
func statusText(err error) string {
	var se *api.StatusError
	if errors.As(err, &se) {
		return se.Message
	}
	return err.Error()
}

// sizeFormat prints sizes in bytes when exact, else for people.
func sizeFormat(exact bool) func(int64) string {
	if exact {
		return func(n int64) string { return fmt.Sprintf("%d B", n) }
	}
	return humanBytes
}
