package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
)

func newStatusCmd() *cobra.Command {
	var (
		asJSON, wait bool
		timeout      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status [--json] [--wait [--timeout D]]",
		Short: "Show what the daemon watches, how far it is, and its health",
		Long: `Show the daemon's roots, index counts, scan progress, watcher health and
hasher calibration. With --wait, first block until the daemon is idle
(initial scan done, nothing pending), drawing a progress bar on a terminal;
--timeout bounds the wait (exit status 1 when it runs out).

--wait also waits for a daemon that is just starting: up to 10 s (or
--timeout, if shorter) for its socket to appear, as in
"annexd DIR & annexctl status --wait", and then through its start-up
(hashing calibration) as part of the wait for idle.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			var st api.Status
			if wait {
				st, err = waitIdle(ctx, c, timeout, newProgressBar(cmd))
			} else {
				st, err = c.Status(ctx)
			}
			if err != nil && !errors.Is(err, errWaitTimeout) {
				return apiFailure(c, err)
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			if asJSON {
				if jerr := writeJSON(out, st); jerr != nil {
					return jerr
				}
			} else {
				printStatus(out, st)
			}
			if ferr := flushOut(out); ferr != nil {
				return ferr
			}
			if err != nil {
				return &exitError{Code: exitFailure, Err: fmt.Errorf("status: daemon not idle after %v", timeout)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the status as one JSON object (see docs/cli.md)")
	f.BoolVar(&wait, "wait", false, "block until the daemon is idle")
	f.DurationVar(&timeout, "timeout", 0, "with --wait: give up after this long (0: never)")
	return cmd
}

var errWaitTimeout = errors.New("wait timed out")

// waitIdle long-polls until the daemon is idle. With a terminal it polls
// every half second to redraw the bar; otherwise in long polls.
func waitIdle(ctx context.Context, c *api.Client, timeout time.Duration, bar *progressBar) (api.Status, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	poll := time.Minute
	if bar != nil {
		poll = 500 * time.Millisecond
	}
	var st api.Status
	begin, seen, got := time.Now(), false, false
	for {
		p := poll
		if dl, ok := ctx.Deadline(); ok {
			p = min(p, max(time.Until(dl)-50*time.Millisecond, 0))
		}
		next, err := c.WaitIdle(ctx, p)
		if errors.Is(err, api.ErrBusy) {
			bar.clear()
			return st, err // busy until --timeout: say so, not "not idle"
		}
		if !seen && comingUp(err) && time.Since(begin) < startWait {
			if sleepCtx(ctx, startPoll) == nil {
				continue
			}
			bar.clear()
			return st, err // the daemon did not come up before --timeout
		}
		seen = true
		if err != nil {
			// The client says DeadlineExceeded in the instant after the
			// deadline passed, before ctx.Err() does: that is --timeout too.
			if timeout > 0 && (ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded)) {
				bar.clear()
				return timedOut(ctx, c, st, got)
			}
			return st, err
		}
		st, got = next, true
		if st.Idle {
			if bar.shown() {
				bar.finish(barLine(st)) // the end: 100 %, left on the screen
			}
			return st, nil
		}
		bar.draw(barLine(st))
		if ctx.Err() != nil {
			bar.clear()
			return st, errWaitTimeout
		}
	}
}

// timedOut ends a wait at --timeout with the status as it is: the last
// answer, or a fresh one when the daemon gave none in time (a busy
// machine). A status never received is not printed as if it were the
// daemon's: zeros would be a lie.
func timedOut(ctx context.Context, c *api.Client, st api.Status, got bool) (api.Status, error) {
	if got {
		return st, errWaitTimeout
	}
	fresh, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	now, err := c.Status(fresh)
	if err != nil {
		return st, err
	}
	return now, errWaitTimeout
}

// How long status --wait waits for a daemon's socket to appear, and how
// often it looks.
const (
	startWait = 10 * time.Second
	startPoll = 50 * time.Millisecond
)

// comingUp reports whether err says that nothing listens on the socket
// yet: it is missing, or a dead daemon's socket file is still there.
func comingUp(err error) bool {
	var nd *api.NoDaemonError
	return errors.As(err, &nd) && (errors.Is(nd.Err, syscall.ENOENT) || errors.Is(nd.Err, syscall.ECONNREFUSED))
}

// sleepCtx sleeps for d or until ctx ends, and returns ctx.Err().
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// barLine is one progress line: the bar (progressFraction), what the walks
// found against what they expect, what is hashed and pending, and the
// estimate when the daemon has one. While the tree is still being counted
// there is no bar: nothing to measure against yet.
func barLine(st api.Status) string {
	if st.Starting != "" {
		return "annexd is starting: " + st.Starting
	}
	s := st.Scan
	var line string
	if w := s.Walk; w != nil && w.ExpectFrom == "counting" {
		line = fmt.Sprintf("walking: %s files (%s) so far; counting the tree: %s files (%s) yet",
			groupDigits(w.Files), humanBytes(w.Bytes), groupDigits(w.ExpectFiles), humanBytes(w.ExpectBytes))
	} else {
		frac := progressFraction(s)
		if st.Idle {
			frac = 1
		}
		line = meter(frac)
		switch w := s.Walk; {
		case w != nil && w.Walking > 0:
			line += fmt.Sprintf("walking: %s of ~%s files", groupDigits(w.Files), groupDigits(max(w.ExpectFiles, w.Files)))
		case w != nil:
			line += fmt.Sprintf("walked: %s files", groupDigits(w.Files))
		default:
			line += groupDigits(s.FilesSeen) + " files seen"
		}
	}
	line += fmt.Sprintf(", %s hashed (%s), %s pending", groupDigits(s.FilesHashed), humanBytes(s.BytesHashed), groupDigits(st.Pending))
	if s.EstimateSeconds > 0 {
		line += fmt.Sprintf(", ~%s left", (time.Duration(s.EstimateSeconds) * time.Second).Round(time.Second))
	}
	if st.Backlog.Changes > 0 {
		line += fmt.Sprintf(", backlog %s (index full)", groupDigits(st.Backlog.Changes))
	}
	return line
}

// progressFraction is how far the work is: while walks run, the bytes
// settled of those they expect, below 1 until the walks end; afterwards
// the bytes seen less those still queued.
func progressFraction(s api.ScanProgress) float64 {
	if w := s.Walk; w != nil {
		total := max(w.ExpectBytes, w.Bytes)
		if total <= 0 {
			return 0
		}
		return min(float64(w.DoneBytes)/float64(total), 0.99)
	}
	if s.BytesSeen <= 0 {
		return 0
	}
	return min(max(1-float64(s.BytesQueued)/float64(s.BytesSeen), 0), 1)
}

// printStatus writes the status for people.
func printStatus(w io.Writer, st api.Status) {
	up := "?"
	if !st.StartedAt.IsZero() {
		up = time.Since(st.StartedAt).Round(time.Second).String()
	}
	fmt.Fprintf(w, "annexd %s (api %d, %s), pid %d, up %s\n", st.Version, st.APIVersion, st.GoVersion, st.PID, up)
	fmt.Fprintf(w, "index:   %s (schema %d): %s files, %s\n", st.IndexPath, st.SchemaVersion,
		groupDigits(st.Files), humanBytes(st.Bytes))
	state := "idle"
	switch {
	case st.Starting != "":
		state = "starting: " + st.Starting + " (lookups are answered once it is done)"
	case !st.Idle:
		s := st.Scan
		state = fmt.Sprintf("busy: %s files seen, %s hashed (%s), %s queued, %s pending",
			groupDigits(s.FilesSeen), groupDigits(s.FilesHashed), humanBytes(s.BytesHashed),
			groupDigits(s.FilesQueued), groupDigits(st.Pending))
		if w := s.Walk; w != nil {
			state += fmt.Sprintf("; walking: %s files so far, %s %s expected (%s)",
				groupDigits(w.Files), groupDigits(w.ExpectFiles), plural(w.ExpectFiles, "file", "files"), w.ExpectFrom)
		}
		if s.EstimateSeconds > 0 {
			state += fmt.Sprintf(", ~%s left", (time.Duration(s.EstimateSeconds) * time.Second).Round(time.Second))
		}
	}
	fmt.Fprintf(w, "state:   %s\n", state)
	if b := st.Backlog; b.Changes > 0 {
		fmt.Fprintf(w, "backlog: %s changes not written to the index yet, retried since %s: %s\n",
			groupDigits(b.Changes), b.Since.Local().Format(time.TimeOnly), b.Reason)
	}
	fmt.Fprintln(w, "roots:")
	for _, r := range st.Roots {
		if st.Starting != "" {
			fmt.Fprintf(w, "  %s  not scanned or watched yet\n", r.Path)
			continue
		}
		fmt.Fprintf(w, "  %s  %s\n", r.Path, rootState(r))
		if r.Overflows > 0 {
			fmt.Fprintf(w, "      %s\n", overflowLine(r))
		}
	}
	wt := st.Watcher
	if st.Starting != "" {
		fmt.Fprintln(w, "watcher: not started yet")
		printOutside(w, st)
		return
	}
	health := "healthy"
	if !wt.Healthy {
		health = "DEGRADED"
	}
	fmt.Fprintf(w, "watcher: %s, %s watches (limit %s", health, groupDigits(wt.Watches), groupDigits(wt.WatchLimit))
	if wt.WatchesNeeded > 0 {
		fmt.Fprintf(w, ", about %s needed", groupDigits(wt.WatchesNeeded))
	}
	fmt.Fprintln(w, ")")
	if wt.Message != "" {
		fmt.Fprintf(w, "         %s\n", wt.Message)
	}
	printOutside(w, st)
	printAway(w, st.Away)
	printDedupStatus(w, st.Dedup)
	printHub(w, st) // cmd_status_hub.go
	printAuditLine(w, st.Audit)
	if cal := st.Calibration; cal != nil {
		fmt.Fprintf(w, "hasher:  %s\n", cal.Summary)
	}
}

// printOutside lists the records outside the roots and the fix.
func printOutside(w io.Writer, st api.Status) {
	if len(st.OutsideRoots) == 0 {
		return
	}
	var n int64
	for _, o := range st.OutsideRoots {
		n += max(o.Files, 0)
	}
	fmt.Fprintf(w, "outside: %s %s outside the roots, left from runs with other roots and not checked since:\n",
		groupDigits(n), plural(n, "record", "records"))
	for _, o := range st.OutsideRoots {
		what := ""
		if o.Direct {
			what = " (its own files; the roots below it are kept)"
		}
		fmt.Fprintf(w, "  %s  %s %s%s\n", o.Path, groupDigits(o.Files), plural(o.Files, "file", "files"), what)
	}
	fmt.Fprintln(w, "         drop them with: annexctl forget DIR... (--dry-run first), or run annexd with them as roots")
}

// overflowLine says how often the root's inotify queue overflowed, when
// last, and whether the rescan that repairs it followed.
func overflowLine(r api.RootStatus) string {
	line := fmt.Sprintf("%s inotify queue %s (events lost), the last at %s (%s ago); ",
		groupDigits(int64(r.Overflows)), plural(int64(r.Overflows), "overflow", "overflows"),
		r.LastOverflow.Local().Format(time.DateTime), time.Since(r.LastOverflow).Round(time.Second))
	if r.RescanPending {
		return line + "its rescan is pending"
	}
	return line + fmt.Sprintf("rescanned at %s", r.LastRescan.Local().Format(time.DateTime))
}

func rootState(r api.RootStatus) string {
	if r.Away != "" { // what a scan saw there is not the root's file system
		return joinReason(r.Away+"; its records are kept", r.Reason)
	}
	parts := []string{"scanning"}
	switch {
	case r.RescanPending:
		parts[0] = "rescan pending after an inotify overflow"
	case r.ScanDone:
		parts[0] = "scanned"
	}
	switch {
	case r.Degraded:
		parts = append(parts, "DEGRADED (periodic rescans)")
	case r.Watched:
		parts = append(parts, "watched")
	default:
		parts = append(parts, "not watched")
	}
	return joinReason(strings.Join(parts, ", "), r.Reason)
}

// joinReason adds the root's reason, if any, to its state.
func joinReason(state, reason string) string {
	if reason == "" {
		return state
	}
	return state + ", " + reason
}

// printAway lists the file systems whose records wait for them.
func printAway(w io.Writer, away []api.AwayFileSystem) {
	for i, fs := range away {
		label := "away:   "
		if i > 0 {
			label = "        "
		}
		var notes []string
		if fs.Point != "" {
			notes = append(notes, "last mounted at "+fs.Point)
		}
		if !fs.LastSeen.IsZero() {
			notes = append(notes, "last seen "+fs.LastSeen.Local().Format(time.DateTime))
		}
		notes = append(notes, "another file system is there now")
		fmt.Fprintf(w, "%s%s %s of %s wait for it (%s)\n", label,
			groupDigits(fs.Records), plural(fs.Records, "record", "records"),
			strings.TrimSpace(fs.Type+" "+fs.Key), strings.Join(notes, "; "))
	}
}
