package daemon

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/watcher"
)

// markUnreadable shows every root with a directory the watcher cannot read
// as degraded, with the reason; a root that cannot be read itself is
// neither watched nor scanned. Their records are kept from before and not
// checked meanwhile.
func markUnreadable(out *api.Status, ws []watcher.RootStatus) {
	total := 0
	for i := range out.Roots {
		rs := &out.Roots[i]
		w, ok := findRoot(ws, rs.Path)
		if !ok || w.Unreadable == 0 {
			continue
		}
		total += w.Unreadable
		rs.Degraded = true
		reason := unreadableReason(w)
		if rs.Reason != "" {
			reason = rs.Reason + "; " + reason
		}
		rs.Reason = reason
		if w.UnreadableDirs[0].Path == w.Root {
			rs.Watched, rs.ScanDone = false, false
		}
		out.Watcher.Healthy = false
		out.Watcher.Degraded = append(out.Watcher.Degraded, rs.Path)
	}
	if total > 0 {
		msg := fmt.Sprintf("cannot read %d %s (see the roots); their records are kept but not checked until annexd can read them (tried again every few seconds)",
			total, plural(total, "directory", "directories"))
		if out.Watcher.Message != "" {
			msg = out.Watcher.Message + "; " + msg
		}
		out.Watcher.Message = msg
	}
}

func findRoot(ws []watcher.RootStatus, path string) (watcher.RootStatus, bool) {
	for _, w := range ws {
		if w.Root == path {
			return w, true
		}
	}
	return watcher.RootStatus{}, false
}

// unreadableReason names the unreadable directories of one root and why.
func unreadableReason(w watcher.RootStatus) string {
	var b strings.Builder
	first := w.UnreadableDirs[0]
	if first.Path == w.Root {
		fmt.Fprintf(&b, "cannot read the root: %s", first.Reason)
		return b.String()
	}
	fmt.Fprintf(&b, "cannot read %d %s:", w.Unreadable, plural(w.Unreadable, "directory", "directories"))
	for i, d := range w.UnreadableDirs {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s (%s)", d.Path, d.Reason)
	}
	if n := w.Unreadable - len(w.UnreadableDirs); n > 0 {
		fmt.Fprintf(&b, " and %d more", n)
	}
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// healthCollector exports what makes the daemon unhealthy besides the
// watch limit: annexd_watcher_unreadable_dirs and annexd_index_backlog_changes.
type healthCollector struct{ a *App }

var (
	descUnreadable = prometheus.NewDesc("annexd_watcher_unreadable_dirs",
		"Directories of the root that annexd cannot read or watch (the root itself included); their records are kept, unchecked.", []string{"root"}, nil)
	descBacklog = prometheus.NewDesc("annexd_index_backlog_changes",
		"Changes the index writer holds because the index's file system is full; retried once there is room.", nil, nil)
)

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUnreadable
	ch <- descBacklog
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.a.w.Status().Roots {
		ch <- prometheus.MustNewConstMetric(descUnreadable, prometheus.GaugeValue, float64(r.Unreadable), r.Root)
	}
	ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(c.a.st.Backlog().Changes))
}
