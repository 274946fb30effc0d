package main

import (
	"fmt"
	"io"

	"github.com/annexd/annexd/api"
)

// printHub writes the link to the hub for people: whether it is up, the
// changes published and acknowledged, and the hub this daemon runs.
func printHub(w io.Writer, st api.Status) {
	h := st.Hub
	if h == nil {
		return
	}
	where := h.URL
	if h.Serving {
		where = "this daemon's hub, in process"
	}
	switch {
	case h.Problem != "":
		fmt.Fprintf(w, "hub:     NOT PUBLISHING as %s to %s: %s\n", h.Name, where, h.Problem)
	case h.Connected:
		fmt.Fprintf(w, "hub:     connected to %s as %s; ", where, h.Name)
	default:
		fmt.Fprintf(w, "hub:     NOT CONNECTED to %s as %s", where, h.Name)
		if h.LastError != "" {
			fmt.Fprintf(w, " (%s)", h.LastError)
		}
		fmt.Fprint(w, "; changes wait in the index; ")
	}
	if h.Problem == "" {
		fmt.Fprintf(w, "change %s, published %s, acknowledged %s, lag %s", groupDigits(int64(h.Seq)),
			groupDigits(int64(h.Published)), groupDigits(int64(h.Acked)), groupDigits(int64(h.Lag)))
		if h.Resending {
			fmt.Fprint(w, ", resending the index whole")
		}
		fmt.Fprintln(w)
	}
	if h.Rival != "" {
		fmt.Fprintf(w, "         WARNING: %s\n", h.Rival)
	}
	if h.Serving {
		fmt.Fprintf(w, "         serving on %s: %d %s", h.Listen, h.Hosts, plural(int64(h.Hosts), "host", "hosts"))
		if h.Stale > 0 {
			fmt.Fprintf(w, ", %d STALE", h.Stale)
		}
		fmt.Fprintln(w)
	}
}
