package query

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/hasher/calibrate"
	"github.com/annexd/annexd/internal/indexer"
	"github.com/annexd/annexd/store"
	"github.com/annexd/annexd/watcher"
)

// goVersion is reported by status.
var goVersion = runtime.Version()

// Status is a snapshot of the daemon: what the index holds, the scan, the
// watches, the records outside the roots and away, the calibration, and
// what the other parts report.
func (x *Index) Status(ctx context.Context) (api.Status, error) {
	ix := x.cfg.Indexer
	if ix.Progress().Idle {
		_ = x.cfg.Store.Settle(ctx) // an idle daemon's counts are complete; a failed merge is logged
	}
	s, err := x.cfg.Store.Stats()
	if err != nil {
		return api.Status{}, err
	}
	p := ix.Progress()
	ws := x.cfg.Watcher.Status()
	out := Base(s, x.cfg.About)
	out.Pending, out.Idle = int64(p.FilesQueued+p.Watching), p.Idle
	out.Scan = scanProgress(p)
	out.OutsideRoots, out.OutsideRootsChecked = x.outsideStatus()
	out.Away = x.awayStatus(ctx)
	x.addParts(&out)
	out.Watcher, out.Roots = x.watcherStatus(ws.Roots)
	x.markRootsAway(ctx, &out)
	out.Calibration = calibration(x.cfg.About.Calibration)
	markUnreadable(&out, ws.Roots)
	markBacklog(&out, x.cfg.Store.Backlog())
	out.Scan.Walk = walkProgress(p.Walk)
	return out, nil
}

// Base is what every status says, the daemon's start's too: the daemon
// and what the index holds.
func Base(s store.Stats, about About) api.Status {
	return api.Status{Version: about.Version, GoVersion: goVersion, PID: os.Getpid(), StartedAt: about.Started,
		IndexPath: about.IndexPath, SchemaVersion: int(s.SchemaVer), Files: s.Files, Bytes: s.Bytes}
}

// addParts adds what the other parts report.
func (x *Index) addParts(out *api.Status) {
	p := x.cfg.Parts
	if p.Dedup != nil {
		out.Dedup = p.Dedup()
	}
	if p.Hub != nil {
		out.Hub = p.Hub()
	}
	if p.Audit != nil {
		out.Audit = p.Audit()
	}
}

func scanProgress(p indexer.Progress) api.ScanProgress {
	return api.ScanProgress{
		Running:         p.ScansPending > 0,
		FilesSeen:       p.FilesSeen,
		BytesSeen:       p.BytesSeen,
		FilesHashed:     p.FilesHashed,
		BytesHashed:     p.BytesHashed,
		FilesQueued:     int64(p.FilesQueued),
		BytesQueued:     p.BytesQueued,
		EstimateSeconds: p.Remaining.Seconds(),
	}
}

// watcherStatus is the health of the watches and each root's state.
func (x *Index) watcherStatus(ws []watcher.RootStatus) (api.WatcherStatus, []api.RootStatus) {
	out := api.WatcherStatus{Healthy: true}
	var roots []api.RootStatus
	for _, r := range ws {
		rs := api.RootStatus{Path: r.Root, ScanDone: x.cfg.Indexer.RootScanned(r.Root), Watched: !r.Degraded, Degraded: r.Degraded,
			Overflows: r.Overflows, LastOverflow: r.LastOverflow, LastRescan: r.LastRescan,
			RescanPending: !r.LastOverflow.IsZero() && r.LastRescan.Before(r.LastOverflow)}
		out.Watches += int64(r.Watches)
		out.WatchesNeeded += int64(r.WatchesNeeded)
		out.WatchLimit = int64(r.MaxUserWatches)
		if r.Degraded {
			rs.Reason = fmt.Sprintf("%d directories have no watch; run: %s", r.Unwatched, r.Sysctl)
			out.Healthy = false
			out.Degraded = append(out.Degraded, r.Root)
			out.Message = "inotify watch limit reached; run: " + r.Sysctl
		}
		if r.Away != "" {
			rs.Watched, rs.Away = !r.RootMissing && !r.Degraded, r.Away
			out.Healthy = false
			out.Message = r.Root + ": " + r.Away
		}
		if rs.RescanPending && !r.Degraded {
			out.Healthy = false // events were lost until the rescan
			out.Message = "inotify queue overflowed (events lost); a rescan of " + r.Root + " is pending"
		}
		roots = append(roots, rs)
	}
	return out, roots
}

// rootAwayWhy is a root's away when its file system was away at start;
// the watcher says the same when it goes away while annexd runs.
const rootAwayWhy = "file system not mounted, waiting (the folder beneath it is watched)"

// markRootsAway shows a root whose file system is not mounted, though the
// watcher saw no unmount (it was away when annexd started), as away: the
// index remembers that another file system held it (RootAway).
func (x *Index) markRootsAway(ctx context.Context, out *api.Status) {
	for i := range out.Roots {
		rs := &out.Roots[i]
		if rs.Away != "" {
			continue
		}
		if _, away := x.cfg.Indexer.RootAway(ctx, rs.Path); away {
			rs.Away = rootAwayWhy
			out.Watcher.Healthy = false
			out.Watcher.Message = rs.Path + ": " + rs.Away
		}
	}
}

// calibration is the status's account of the hasher's calibration; nil
// without one.
func calibration(c *calibrate.Calibration) *api.Calibration {
	if c == nil {
		return nil
	}
	return &api.Calibration{
		Summary: fmt.Sprintf("sha256 %s, inline up to %d bytes, %d pool workers, external %s",
			c.Policy.SHA256, c.Policy.InlineMax, c.Policy.Workers, externalSummary(c.Policy.External, c.Policy.ExternalMin)),
		Params: map[string]string{
			"sha256":       string(c.Policy.SHA256),
			"inline_max":   fmt.Sprint(c.Policy.InlineMax),
			"workers":      fmt.Sprint(c.Policy.Workers),
			"external":     c.Policy.External,
			"external_min": fmt.Sprint(c.Policy.ExternalMin),
			"took_ms":      fmt.Sprintf("%.0f", c.TookMs),
		},
		MeasuredAt: c.At.Truncate(time.Millisecond),
	}
}

func externalSummary(prog string, min int64) string {
	if prog == "" || min == 0 {
		return "never"
	}
	return fmt.Sprintf("%s from %d bytes", filepath.Base(prog), min)
}

// awayStatus lists the file systems whose records are on the shelf.
func (x *Index) awayStatus(ctx context.Context) []api.AwayFileSystem {
	fss, counts, err := x.cfg.Indexer.Away(ctx)
	if err != nil {
		x.log.Warn("cannot list the file systems away", "err", err)
		return nil
	}
	var out []api.AwayFileSystem
	for _, fs := range fss {
		af := api.AwayFileSystem{ID: fmt.Sprintf("%016x", fs.ID), Key: fs.Key, Type: fs.Type, Source: fs.Source,
			Point: fs.Point, Records: int64(counts[fs.ID])}
		if fs.LastSeen > 0 {
			af.LastSeen = time.Unix(0, fs.LastSeen)
		}
		out = append(out, af)
	}
	return out
}

// Starting is the daemon before it serves (apiserver.Starting): what the
// index holds, and what the daemon does meanwhile.
type Starting struct {
	Store Store
	About About
	Roots []string
	// Doing says what the daemon does ("calibrating hashing").
	Doing func() string
}

// Phase says what the daemon does.
func (s Starting) Phase() string { return s.Doing() }

// Status is the status while the daemon starts.
func (s Starting) Status(context.Context) (api.Status, error) {
	st, err := s.Store.Stats()
	if err != nil {
		return api.Status{}, err
	}
	out := Base(st, s.About)
	out.Starting = s.Doing()
	out.Watcher = api.WatcherStatus{Message: "not watching yet: annexd is starting"}
	for _, r := range s.Roots {
		out.Roots = append(out.Roots, api.RootStatus{Path: r})
	}
	return out, nil
}

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

// markBacklog adds what the index writer holds for lack of space to the
// status: the daemon is not idle while it holds anything.
func markBacklog(out *api.Status, b store.Backlog) {
	if b.Changes == 0 {
		return
	}
	out.Idle = false
	out.Backlog = api.Backlog{Changes: int64(b.Changes), Since: b.Since}
	if b.Err != nil {
		out.Backlog.Reason = b.Err.Error()
	}
}

// walkProgress is the API's form of the running walks' progress.
func walkProgress(w *indexer.WalkProgress) *api.WalkProgress {
	if w == nil {
		return nil
	}
	return &api.WalkProgress{Walking: w.Walking, Files: w.Files, Bytes: w.Bytes, ExpectFiles: w.ExpectFiles, ExpectBytes: w.ExpectBytes,
		ExpectFrom: w.ExpectFrom, DoneBytes: w.DoneBytes}
}
