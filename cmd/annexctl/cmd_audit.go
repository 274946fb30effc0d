package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
)

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Verify the indexed files against their keys: runs, status, problems",
		Long: `The audit reads every indexed file again, on the schedule of the config's
[audit] section, and compares it with its key. It tells bit rot from edits:
a file whose stat fields and write history are unchanged but whose content
differs is corrupt, and its record and key are kept; one whose ctime alone
moved, with no write seen, changed without a trace (untraced), and keeps
its key too; a file that was edited goes back to the indexer. audit run
starts a run now; audit status says what the audit does; audit problems
lists the files found corrupt, untraced, unreadable or with a lost write;
audit accept takes a flagged file's content once you have dealt with it;
audit history lists the passes completed and the coverage each left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newAuditRunCmd(), newAuditStatusCmd(), newAuditProblemsCmd(),
		newAuditPauseCmd(true), newAuditPauseCmd(false), newAuditAcceptCmd(), newAuditHealCmd(),
		newAuditHistoryCmd())
	return cmd
}

type auditRunFlags struct {
	wait, fullSpeed, asJSON bool
	timeLimit               daysDuration
}

// daysDuration is a flag's duration written as the config writes them,
// days too: "5h", "1d12h". annexctl does not import internal/config (its
// TOML parser would slow every start), so the day prefix is parsed here.
type daysDuration time.Duration

func (d *daysDuration) Set(s string) error {
	bad := fmt.Errorf(`duration %q: want a number with a unit, such as "5h", "90m", "1d" or "1d12h"`, s)
	days, rest := 0.0, s
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.ParseFloat(s[:i], 64)
		if err != nil || n < 0 || n > 1e5 {
			return bad
		}
		days, rest = n, s[i+1:]
	}
	var v time.Duration
	if rest != "" {
		var err error
		if v, err = time.ParseDuration(rest); err != nil || (days > 0 && v < 0) {
			return bad
		}
	} else if !strings.Contains(s, "d") {
		return bad
	}
	*d = daysDuration(time.Duration(days*float64(24*time.Hour)) + v)
	return nil
}

func (d *daysDuration) String() string { return time.Duration(*d).String() }
func (d *daysDuration) Type() string   { return "duration" }

func newAuditRunCmd() *cobra.Command {
	var f auditRunFlags
	cmd := &cobra.Command{
		Use:   "run [--wait] [--time-limit D] [--full-speed] [--json] [PATH...]",
		Short: "Start an audit run now",
		Long: `Start an audit run now: it goes on with the pass in progress (or begins
one), least recently verified files first. PATHs narrow the run to the
files at or below them. --full-speed reads with every CPU, without the
rate cap and without waiting for a busy machine; --time-limit stops the
run after D (the pass goes on at the next run).

Without --wait the run's id is printed and annexctl exits 0: the run goes
on in the daemon. With --wait annexctl waits for its end, drawing its
progress on a terminal, prints a summary, and exits with 0 when nothing
was found, 4 when a file was found corrupt, 5 when one was unreadable or
had a lost write (and none was corrupt), 6 when one changed without a
trace (and none of those), 101 when the time limit stopped
the run with nothing found, 1 when the run was stopped otherwise (paused,
another run started), nothing is indexed at a PATH, or Ctrl-C stopped the
waiting (the run goes on), 3 when the daemon stopped or restarted before
the run ended.`,
		RunE: func(cmd *cobra.Command, args []string) error { return runAudit(cmd, args, f) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.wait, "wait", false, "wait for the run's end and exit with its status")
	fl.Var(&f.timeLimit, "time-limit", `stop the run after this long: "5h", "1d12h" (0: no limit)`)
	fl.BoolVar(&f.fullSpeed, "full-speed", false, "read with every CPU, without the rate cap and the gates")
	fl.BoolVar(&f.asJSON, "json", false, `print {"id":N}, or with --wait the run's summary, as JSON`)
	return cmd
}

func runAudit(cmd *cobra.Command, args []string, f auditRunFlags) error {
	if f.timeLimit < 0 {
		return &exitError{Code: exitUsage, Err: errors.New("audit run: --time-limit must not be negative")}
	}
	paths, err := argPaths("audit run", args)
	if err != nil {
		return err
	}
	c, err := dial(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := cmd.Context()
	req := api.AuditRequest{Paths: paths, TimeLimit: time.Duration(f.timeLimit), FullSpeed: f.fullSpeed}
	id, err := c.AuditStart(ctx, req)
	if resolved, ok := resolveDirs(paths); ok && errors.Is(err, api.ErrOutsideRoots) {
		req.Paths = resolved
		id2, err2 := c.AuditStart(ctx, req)
		if !errors.Is(err2, api.ErrOutsideRoots) {
			id, err = id2, err2
		}
	}
	if errors.Is(err, api.ErrOutsideRoots) || errors.Is(err, api.ErrNotFound) {
		return &exitError{Code: exitFailure, Err: fmt.Errorf("audit run: %s; nothing was started", statusMessage(err))}
	}
	if err != nil {
		return apiFailure(c, err)
	}
	out := bufio.NewWriter(cmd.OutOrStdout())
	if !f.wait {
		if f.asJSON {
			fmt.Fprintf(out, "{\"id\":%d}\n", id)
		} else {
			fmt.Fprintf(out, "audit run %d started; annexctl audit status shows it\n", id)
		}
		if err := flushOut(out); err != nil {
			return err
		}
		sayWaiting(ctx, c, id, cmd.ErrOrStderr())
		return nil
	}
	bar := newProgressBar(cmd)
	wctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := waitRun(wctx, c, id, bar, cmd.ErrOrStderr())
	bar.clear()
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		return &exitError{Code: exitFailure, Err: fmt.Errorf(
			"audit run: left before the run's end; audit run %d goes on in the daemon (annexctl audit status shows it, annexctl audit pause stops it)", id)}
	}
	if err != nil {
		return apiFailure(c, err)
	}
	if f.asJSON {
		if err := writeJSON(out, r); err != nil {
			return err
		}
	} else {
		printRun(out, r)
	}
	if err := flushOut(out); err != nil {
		return err
	}
	return runExit(r)
}

// argPaths makes each PATH absolute and clean.
func argPaths(verb string, args []string) ([][]byte, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, &exitError{Code: exitFailure, Err: fmt.Errorf("%s: current directory: %w", verb, err)}
	}
	var paths [][]byte
	for _, a := range args {
		if a == "" {
			return nil, &exitError{Code: exitUsage, Err: fmt.Errorf(`%s: an empty PATH (an unset variable?); give "." for the current directory`, verb)}
		}
		paths = append(paths, absPath([]byte(a), cwd))
	}
	return paths, nil
}

// resolveDirs resolves the symlinks in the directory part of each path
// (resolveDir), for a second try of paths found outside the roots. It
// reports whether any path changed.
func resolveDirs(paths [][]byte) ([][]byte, bool) {
	out := make([][]byte, len(paths))
	changed := false
	for i, p := range paths {
		out[i] = p
		if q := resolveDir(p); q != nil {
			out[i], changed = q, true
		}
	}
	return out, changed
}

// waitRun long-polls until run id ends. With a terminal it polls twice a
// second and draws the progress; otherwise every waitPoll. Whenever the
// run waits at a gate, on any output, it says why on note, at once (the
// first poll is after a second) and again when the reason changes. A
// daemon gone between two polls, or one that ended the run by stopping,
// is ErrClosed: run ids are never reused, so a restarted daemon does not
// know id.
func waitRun(ctx context.Context, c *api.Client, id uint64, bar *progressBar, note io.Writer) (api.AuditRun, error) {
	poll := waitPoll
	if bar != nil {
		poll = 500 * time.Millisecond
	}
	said := ""
	for first := true; ; first = false {
		p := poll
		if first {
			p = min(p, time.Second)
		}
		r, err := c.AuditRun(ctx, id, p)
		if gone(err) || err == nil && r.StoppedBy == api.AuditShutdown {
			return r, fmt.Errorf("%w before audit run %d ended", api.ErrClosed, id)
		}
		if err != nil || r.Done() {
			return r, err
		}
		st, err := c.AuditStatus(ctx)
		if gone(err) {
			return r, fmt.Errorf("%w before audit run %d ended", api.ErrClosed, id)
		}
		if err != nil {
			return r, err
		}
		why := runWaits(st, id)
		if why != "" && why != said {
			bar.clear()
			fmt.Fprintln(note, waitNote(id, why))
		}
		said = why
		if bar != nil {
			bar.draw(auditBarLine(r, st))
		}
	}
}

// gone reports an error that says the daemon, or the run waited for, is
// gone: a daemon that stopped or restarted (run ids are never reused).
func gone(err error) bool {
	return errors.Is(err, api.ErrNoDaemon) || errors.Is(err, api.ErrNotFound) || errors.Is(err, api.ErrClosed)
}

// sayWaiting tells on note, after a short look, when run id waits at a
// gate; it says nothing when it cannot tell.
func sayWaiting(ctx context.Context, c *api.Client, id uint64, note io.Writer) {
	r, err := c.AuditRun(ctx, id, 300*time.Millisecond)
	if err != nil || r.Done() {
		return
	}
	if st, err := c.AuditStatus(ctx); err == nil {
		if why := runWaits(st, id); why != "" {
			fmt.Fprintln(note, waitNote(id, why))
		}
	}
}

// runWaits is why run id waits at a gate, or "".
func runWaits(st api.AuditStatus, id uint64) string {
	if st.Run != nil && st.Run.ID == id && st.State == "waiting" {
		return st.Reason
	}
	return ""
}

// waitNote is the line that says why run id waits, and how not to.
func waitNote(id uint64, why string) string {
	return fmt.Sprintf("annexctl: audit run %d waits: %s; it reads once that passes, or run it with --full-speed to read now", id, why)
}

// waitPoll is how long one poll of audit run --wait lasts without a
// terminal.
const waitPoll = 5 * time.Second

// auditBarLine is one progress line of a run: the pass's share done when
// the run goes through the pass, the files decided, the rate.
func auditBarLine(r api.AuditRun, st api.AuditStatus) string {
	line := fmt.Sprintf("audit run %d: %s files checked, %s verified", r.ID, groupDigits(sum(r.Counts)), humanBytes(r.Bytes))
	if p := st.Pass; p != nil && st.Run != nil && st.Run.ID == r.ID && p.Files > 0 {
		line = meter(min(float64(p.Done)/float64(p.Files), 1)) + line
		if p.ETASeconds > 0 {
			line += fmt.Sprintf(", ~%s left", (time.Duration(p.ETASeconds) * time.Second).Round(time.Second))
		}
	}
	if st.Rate > 0 {
		line += fmt.Sprintf(", %s/s", humanBytes(int64(st.Rate)))
	}
	if st.State == "waiting" {
		line += " (waiting: " + st.Reason + ")"
	}
	return line
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// auditClasses are the classes of audited files, in the order they are
// shown.
var auditClasses = []string{"ok", "corrupt", "untraced", "lost_write", "unreadable", "modified", "missing"}

// runExit is the exit status of a run that ended as r says.
func runExit(r api.AuditRun) error {
	switch {
	case r.Counts["corrupt"] > 0:
		return &exitError{Code: exitCorrupt}
	case r.Counts["unreadable"] > 0 || r.Counts["lost_write"] > 0:
		return &exitError{Code: exitUnreadable}
	case r.Counts["untraced"] > 0:
		return &exitError{Code: exitUntraced}
	case r.Left.Away > 0: // not verified: that is no success
		return &exitError{Code: exitFailure}
	case r.StoppedBy == api.AuditDone:
		return nil
	case r.StoppedBy == api.AuditTimeLimit:
		return &exitError{Code: exitTimeLimit}
	}
	return &exitError{Code: exitFailure}
}

// printRun writes a run's summary for people.
func printRun(w io.Writer, r api.AuditRun) {
	took := r.Ended.Sub(r.Began).Round(time.Millisecond)
	if r.Began.IsZero() {
		took = 0
	}
	n := sum(r.Counts)
	fmt.Fprintf(w, "audit run %d: %s after %s: %s %s checked, %s verified\n", r.ID, stoppedBy(r), took,
		groupDigits(n), plural(n, "file", "files"), humanBytes(r.Bytes))
	for _, c := range auditClasses {
		if n := r.Counts[c]; n > 0 {
			fmt.Fprintf(w, "  %-11s %s\n", c, groupDigits(n))
		}
	}
	if r.Transient > 0 {
		fmt.Fprintf(w, "  %s %s read wrong once and right from the disk (see the daemon's log)\n",
			groupDigits(r.Transient), plural(r.Transient, "file", "files"))
	}
	if line := cacheOnlyLine(r.CacheOnly); line != "" {
		fmt.Fprintf(w, "  %s\n", line)
	}
	if line := leftLine(r.Left); line != "" {
		fmt.Fprintf(w, "  %s\n", line)
	}
	if r.Counts["corrupt"]+r.Counts["lost_write"]+r.Counts["unreadable"]+r.Counts["untraced"] > 0 {
		fmt.Fprintln(w, "  the files: annexctl audit problems")
	}
}

// leftLine says how many files an audit left for later, and why; "" when
// it left none.
func leftLine(l api.AuditLeft) string {
	if l.Files == 0 {
		return ""
	}
	var whys []string
	if l.Away > 0 {
		whys = append(whys, fmt.Sprintf("their file system is not mounted (%s)", groupDigits(l.Away)))
	}
	if busy := l.Files - l.Away; busy > 0 {
		whys = append(whys, fmt.Sprintf("written to each time it tried (%s)", groupDigits(busy)))
	}
	return fmt.Sprintf("%s %s left unverified for a later run (%s): %s", groupDigits(l.Files), plural(l.Files, "file", "files"),
		humanBytes(l.Bytes), strings.Join(whys, "; "))
}

// cacheOnlyWhy says why files were verified from the page cache only.
var cacheOnlyWhy = map[string]string{
	api.AuditNoDevice: "the file system keeps its files in memory, as tmpfs does",
	api.AuditNoDirect: "the file system does not read directly from its device (some FUSE and network file systems, ZFS)",
	api.AuditCached:   "stored compressed or inline, read through the page cache, which held some of it",
}

// cacheOnlyLine says how many files no device could verify, and why; ""
// when there are none.
func cacheOnlyLine(c api.AuditCacheOnly) string {
	n := sum(c.Files)
	if n == 0 {
		return ""
	}
	var whys []string
	for _, k := range []string{api.AuditNoDevice, api.AuditNoDirect, api.AuditCached} {
		if m := c.Files[k]; m > 0 {
			whys = append(whys, fmt.Sprintf("%s (%s)", cacheOnlyWhy[k], groupDigits(m)))
		}
	}
	return fmt.Sprintf("%s %s not verifiable from a device, checked in the page cache only (%s): %s",
		groupDigits(n), plural(n, "file", "files"), humanBytes(c.Bytes), strings.Join(whys, "; "))
}

// stoppedBy says how a run ended.
func stoppedBy(r api.AuditRun) string {
	switch r.StoppedBy {
	case api.AuditDone:
		return "done"
	case api.AuditTimeLimit:
		return "stopped by its time limit (the pass goes on at the next run)"
	case api.AuditWindow:
		return "stopped at the end of its run window"
	case api.AuditPaused:
		return "stopped: the audit was paused"
	case api.AuditSuperseded:
		return "stopped: another run was started"
	case api.AuditShutdown:
		return "stopped: the daemon stopped"
	case api.AuditError:
		return "failed: " + r.Error
	}
	return r.StoppedBy
}

func newAuditStatusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "Show what the audit does, its progress and coverage",
		Long: `Show whether the audit is running, waiting (and for what), paused or idle;
the rate and progress of the pass in progress with an estimate of the time
left; the coverage: how many files were verified within the schedule's
interval ([audit] every); the last completed pass, the next run, and how
many files are flagged (audit problems lists them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			st, err := c.AuditStatus(cmd.Context())
			if err != nil {
				return apiFailure(c, err)
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			if asJSON {
				if err := writeJSON(out, st); err != nil {
					return err
				}
			} else {
				printAuditStatus(out, st)
			}
			return flushOut(out)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as one JSON object (see docs/cli.md)")
	return cmd
}

// printAuditStatus writes the audit's status for people.
func printAuditStatus(w io.Writer, st api.AuditStatus) {
	state := st.State
	if st.Reason != "" {
		state += ": " + st.Reason
	}
	fmt.Fprintf(w, "audit:     %s\n", state)
	if st.Run != nil {
		fmt.Fprintf(w, "run:       %d (%s), %s files checked, %s verified, %s/s\n", st.Run.ID, runKind(*st.Run),
			groupDigits(sum(st.Run.Counts)), humanBytes(st.Run.Bytes), humanBytes(int64(st.Rate)))
	}
	if p := st.Pass; p != nil {
		line := fmt.Sprintf("pass %d:    %s of %s files (%s of %s), begun %s", p.ID, groupDigits(p.Done), groupDigits(p.Files),
			humanBytes(p.DoneBytes), humanBytes(p.Bytes), p.Began.Local().Format(time.DateTime))
		if p.ETASeconds > 0 {
			line += fmt.Sprintf(", ~%s left", (time.Duration(p.ETASeconds) * time.Second).Round(time.Second))
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "coverage:  %s\n", coverageLine(st.Coverage))
	if l := st.LastPass; l != nil {
		line := countsLine(l.Counts)
		if l.Left.Files > 0 {
			line += "; " + leftLine(l.Left)
		}
		if l.Unread > 0 {
			line += fmt.Sprintf("; %s not read (hashed again or removed meanwhile)", groupDigits(l.Unread))
		}
		fmt.Fprintf(w, "last pass: %d, ended %s: %s\n", l.ID, l.Ended.Local().Format(time.DateTime), line)
	} else {
		fmt.Fprintln(w, "last pass: none completed yet")
	}
	if !st.NextRun.IsZero() {
		fmt.Fprintf(w, "next run:  %s\n", st.NextRun.Local().Format(time.DateTime))
	}
	fmt.Fprintf(w, "problems:  %s", groupDigits(st.Problems))
	if st.Problems > 0 {
		fmt.Fprint(w, " (annexctl audit problems lists them)")
	}
	fmt.Fprintln(w)
	if line := cacheOnlyLine(st.CacheOnly); line != "" {
		fmt.Fprintf(w, "no device: since annexd started, %s\n", line)
	}
	if st.IOPriority != "" {
		fmt.Fprintf(w, "I/O class: %s\n", st.IOPriority)
	}
}

func runKind(r api.AuditRun) string {
	kind := "scheduled"
	if r.Manual {
		kind = "asked for"
	}
	if r.FullSpeed {
		kind += ", full speed"
	}
	return kind
}

// countsLine lists counts by class, ok first.
func countsLine(m map[string]int64) string {
	var parts []string
	for _, c := range auditClasses {
		if n := m[c]; n > 0 {
			parts = append(parts, groupDigits(n)+" "+c)
		}
	}
	if len(parts) == 0 {
		return "no files"
	}
	return strings.Join(parts, ", ")
}

func newAuditProblemsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "problems [--json]",
		Short: "List the files the audit found corrupt, untraced, unreadable or with a lost write",
		Long: `List the files the audit found not ok: corrupt (the content changed though
nothing wrote to the file: bit rot; the record and key are kept), untraced
(the content changed and only the ctime moved, with no write seen: a chmod
on rotten bytes, or a rewrite with the mtime set back while annexd was
down; the key is kept), unreadable (EIO, EACCES) or lost_write (an unclean
shutdown lost the last write before it). A finding follows its file
through renames and is listed under its path now. --json prints one object a line: path (or path_b64 when the name is
not UTF-8), state, backend, recorded and observed (hex digests), size,
seen (RFC 3339) and why. Once a file is dealt with (restored from a
backup, or its new content is right), annexctl audit accept PATH clears
it. Exit status 0 whatever is listed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
			n := 0
			err = c.AuditProblems(cmd.Context(), func(p api.AuditProblem) error {
				if n == 0 && !asJSON {
					fmt.Fprintf(out, "%-10s  %-19s  %10s  %s\n", "STATE", "SEEN", "SIZE", "PATH")
				}
				n++
				if asJSON {
					return writeJSON(out, p)
				}
				fmt.Fprintf(out, "%-10s  %-19s  %10s  %s\n", p.State, p.Seen.Local().Format(time.DateTime), humanBytes(p.Size),
					displayPath(p.Path))
				if p.Why != "" {
					fmt.Fprintf(out, "            %s\n", p.Why)
				}
				return nil
			})
			if err != nil {
				out.Flush()
				return apiFailure(c, err)
			}
			if n == 0 && !asJSON {
				fmt.Fprintln(out, "no problems found")
			}
			return flushOut(out)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object a line")
	return cmd
}

// displayPath is a path for people: its raw bytes, as every plain-text
// output prints names (docs/cli.md, Paths), so that it can be given back.
func displayPath(p []byte) string { return string(p) }

func newAuditPauseCmd(pause bool) *cobra.Command {
	use, short := "resume", "Let scheduled audit runs start again"
	if pause {
		use, short = "pause", "Stop the audit's run in progress and start none until resume, across restarts"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			var st api.AuditStatus
			if pause {
				st, err = c.AuditPause(cmd.Context())
			} else {
				st, err = c.AuditResume(cmd.Context())
			}
			if err != nil {
				return apiFailure(c, err)
			}
			line := "audit: " + st.State
			if st.Reason != "" {
				line += ": " + st.Reason
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			return nil
		},
	}
}

func newAuditAcceptCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "accept PATH...",
		Short: "Take the content flagged files have now as right",
		Long: `Take the content that the files flagged at or below each PATH have now:
a corrupt, untraced or unreadable file is read again and its record takes
the digest read; a lost write is acknowledged. Do this once you have dealt
with the file (restored it, or checked that its new content is right).
Exit status 1 when nothing is flagged at a PATH or a file cannot be read.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			paths, err := argPaths("audit accept", args)
			if err != nil {
				return err
			}
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			out := bufio.NewWriter(cmd.OutOrStdout())
			failed := false
			for _, p := range paths {
				res, err := c.AuditAccept(cmd.Context(), p)
				if q := resolveDir(p); q != nil && errors.Is(err, api.ErrOutsideRoots) {
					if res2, err2 := c.AuditAccept(cmd.Context(), q); !errors.Is(err2, api.ErrOutsideRoots) {
						res, err, p = res2, err2, q
					}
				}
				if errors.Is(err, api.ErrOutsideRoots) {
					out.Flush()
					fmt.Fprintf(cmd.ErrOrStderr(), "annexctl: audit accept: %s\n", statusMessage(err))
					failed = true
					continue
				}
				if errors.Is(err, api.ErrNotFound) {
					out.Flush()
					fmt.Fprintf(cmd.ErrOrStderr(), "annexctl: audit accept: nothing is flagged at or below %s\n", displayPath(p))
					failed = true
					continue
				}
				if err != nil {
					out.Flush()
					return apiFailure(c, err)
				}
				for _, a := range res.Accepted {
					fmt.Fprintf(out, "accepted %s\n", displayPath(a))
				}
				for _, a := range res.Released {
					fmt.Fprintf(out, "removed the rotten bytes a heal kept aside for %s\n", displayPath(a))
				}
				for _, f := range res.Failed {
					out.Flush()
					fmt.Fprintf(cmd.ErrOrStderr(), "annexctl: audit accept: %s: %s\n", displayPath(f.Path), f.Error)
					failed = true
				}
			}
			if err := flushOut(out); err != nil {
				return err
			}
			if failed {
				return &exitError{Code: exitFailure}
			}
			return nil
		},
	}
}

// printAuditLine is the audit's line of annexctl status.
func printAuditLine(w io.Writer, st *api.AuditStatus) {
	if st == nil {
		return
	}
	state := st.State
	if st.Reason != "" {
		state += " (" + st.Reason + ")"
	}
	fmt.Fprintf(w, "audit:   %s; %s; %s %s\n", state, coverageLine(st.Coverage), groupDigits(st.Problems),
		plural(st.Problems, "problem", "problems"))
}

// coverageLine says how many files under the roots were verified within
// the interval. The daemon counts them when asked, unless its last count
// is a few seconds old, and then the line says how old.
func coverageLine(cv api.AuditCoverage) string {
	return coverageLineAt(cv, time.Now())
}

// staleCount is the age from which a count says how old it is.
const staleCount = 5 * time.Second

func coverageLineAt(cv api.AuditCoverage, now time.Time) string {
	every := intervalText(time.Duration(cv.EverySeconds * float64(time.Second)))
	age := ""
	switch {
	case cv.At.IsZero():
		age = " (not counted yet)"
	case now.Sub(cv.At) >= staleCount:
		age = fmt.Sprintf(" (counted %s ago)", now.Sub(cv.At).Round(time.Second))
	}
	if cv.Total == 0 {
		return fmt.Sprintf("no files to verify%s; every file is verified every %s", age, every)
	}
	pct := 100 * float64(cv.Files) / float64(cv.Total)
	return fmt.Sprintf("%s of %s files verified in the last %s (%.0f %%)%s", groupDigits(cv.Files), groupDigits(cv.Total), every, pct, age)
}

// intervalText is an interval as people say it: "30 days", "day", "12
// hours", "hour", "90m0s" for what is no whole number of hours.
func intervalText(d time.Duration) string {
	unit := func(n int64, one, many string) string {
		if n == 1 {
			return one
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	switch {
	case d <= 0:
		return "?"
	case d%(24*time.Hour) == 0:
		return unit(int64(d/(24*time.Hour)), "day", "days")
	case d%time.Hour == 0:
		return unit(int64(d/time.Hour), "hour", "hours")
	case d%time.Minute == 0 && d < time.Hour:
		return unit(int64(d/time.Minute), "minute", "minutes")
	}
	return d.String()
}

func newAuditHealCmd() *cobra.Command {
	var dry, asJSON bool
	cmd := &cobra.Command{
		Use:   "heal [--dry-run] [--json] [PATH...]",
		Short: "Restore files found corrupt from a copy whose bytes verify",
		Long: `Restore each file flagged corrupt at or below each PATH (none: every one)
from another copy of its content whose bytes, read from the disk now, verify.
A copy sharing blocks with the rotten file (a hard link, a reflinked twin) is
no copy. The rotten bytes are kept aside until 'audit accept PATH' or
[audit] heal_keep. --dry-run says what would be done and touches nothing.
Exit status 0 when every file was healed (or would be), 1 when one was not.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			paths, err := argPaths("audit heal", args)
			if err != nil {
				return err
			}
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			res, err := c.AuditHeal(cmd.Context(), api.AuditHealRequest{Paths: paths, DryRun: dry})
			if errors.Is(err, api.ErrOutsideRoots) {
				return &exitError{Code: exitUsage, Err: fmt.Errorf("audit heal: %s", statusMessage(err))}
			}
			if err != nil {
				return apiFailure(c, err)
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			failed := printHeal(out, res, asJSON)
			if err := flushOut(out); err != nil {
				return err
			}
			if failed {
				return &exitError{Code: exitFailure}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dry, "dry-run", false, "say what would be healed, touch nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the answer as one JSON object (see docs/cli.md)")
	return cmd
}

// printHeal prints a heal's answer; it reports whether a file was not
// healed (nor would be).
func printHeal(w io.Writer, res api.AuditHealResult, asJSON bool) bool {
	failed := false
	for _, f := range res.Files {
		if f.Outcome != api.HealHealed && f.Outcome != api.HealWouldHeal {
			failed = true
		}
	}
	if asJSON {
		b, _ := res.MarshalJSON()
		fmt.Fprintf(w, "%s\n", b)
		return failed
	}
	if len(res.Files) == 0 {
		fmt.Fprintln(w, "nothing flagged to heal")
	}
	for _, f := range res.Files {
		from := displayPath(f.Source)
		if f.Host != "" {
			from = "host " + f.Host
		}
		switch f.Outcome {
		case api.HealHealed:
			fmt.Fprintf(w, "healed %s from %s; the rotten bytes are kept at %s\n", displayPath(f.Path), from, f.Aside)
		case api.HealWouldHeal:
			fmt.Fprintf(w, "would heal %s from %s\n", displayPath(f.Path), from)
		default:
			fmt.Fprintf(w, "%s %s: %s\n", strings.ReplaceAll(f.Outcome, "_", " "), displayPath(f.Path), f.Reason)
		}
	}
	return failed
}
