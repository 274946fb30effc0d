package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
)

// dedupShown is how many groups the plan lists for people.
const dedupShown = 10

type dedupFlags struct {
	dry, hardlink, asJSON, nul bool
	minSize                    string
	trash                      bool   // move copies to the trash
	keep                       string // which copy stays
}

func newDedupCmd() *cobra.Command {
	var f dedupFlags
	cmd := &cobra.Command{
		Use:   "dedup [--dry-run] [--hardlink | --trash] [--keep RULE] [--min-size N] [--json | -z] [PATH...]",
		Short: "Make duplicate files share their storage",
		Long: `Make the duplicate files at or below each PATH share their storage; no
PATH means every root. The plan comes from the index: it is printed first,
with the bytes it will free and the groups freeing the most, each as
keeper ← copies. Then annexd carries it out, checking each pair again
first, and the result is printed: what was freed, and each file left
alone with the reason. --dry-run stops after the plan.

By default the copies share the keeper's blocks (FIDEDUPERANGE, on XFS,
btrfs and other file systems that can): every file keeps its inode, its
metadata and its independence, and the kernel compares the bytes first.
Where that is not possible (ext4, tmpfs) nothing there changes, and the
message says so. --hardlink then replaces each copy with a hard link to
the keeper instead: the names share one inode, so a write through one
shows in all. Hard links are made only between files of the same owner,
group, mode and extended attributes, to a keeper with no link outside the
index (an annex.thin object), and never while another process holds the
copy open. A copy another process opens, changes or links while it is
exchanged is put back as it was ("raced"), its writer's bytes kept at its
name; a process that looked the name up more than 50 ms before it opens
the file is the one case a rename cannot serve (see docs/cli.md).

--trash moves each copy to the freedesktop.org trash of its file system
instead ($XDG_DATA_HOME/Trash, or .Trash-UID at the top of the mount),
where any file manager can restore it, with the same checks as
--hardlink. --keep picks the copy that stays in each group: newest,
oldest, shortest-path, or under=DIR (a copy in DIR stays, and so does
every other copy there; a group without one there is left alone). A dry
run with --trash lists every group and the trash its copies go to.

A progress line is drawn on a terminal. Ctrl-C stops the run after the
actions under way and prints what was done; a second Ctrl-C leaves at once.
--json prints the daemon's events, one JSON object a line; -z prints each
group's paths, keeper first, each ending with NUL, and one more NUL after
each group, and the rest on stderr. Exit status 1 when a file was left
alone, a file system could not share extents, or the run was stopped.`,
		RunE: func(cmd *cobra.Command, args []string) error { return runDedup(cmd, args, f) },
	}
	fl := cmd.Flags()
	fl.BoolVarP(&f.dry, "dry-run", "n", false, "only print the plan")
	fl.BoolVar(&f.hardlink, "hardlink", false, "replace copies with hard links to the keeper instead of sharing blocks")
	fl.BoolVar(&f.trash, "trash", false, "move copies to the trash of their file system instead of sharing blocks")
	fl.StringVar(&f.keep, "keep", "", "which copy stays: newest, oldest, shortest-path or under=DIR")
	fl.StringVar(&f.minSize, "min-size", "1", "only files of at least this size (bytes, or with K, M, G, T: 100k, 1.5G)")
	fl.BoolVar(&f.asJSON, "json", false, "print the daemon's events, one JSON object a line (see docs/cli.md)")
	fl.BoolVarP(&f.nul, "nul", "z", false, "print each group's paths, each ending with NUL, and one more NUL after each group")
	return cmd
}

func runDedup(cmd *cobra.Command, args []string, f dedupFlags) error {
	req, err := dedupRequest(args, f)
	if err != nil {
		return err
	}
	c, err := dial(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	p := &dedupPrinter{flags: f, out: out, info: out, stderr: cmd.ErrOrStderr()}
	if f.nul {
		p.info = cmd.ErrOrStderr()
	}
	if !f.asJSON {
		p.bar = newProgressBar(cmd)
		req.Progress = p.bar != nil
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	stop := make(chan struct{})
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	go p.interrupts(ctx, sig, stop, cancel)
	end, err := c.Dedup(ctx, req, stop, p.event)
	p.bar.clear()
	return p.finish(c, end, err)
}

// dedupRequest checks the flags and makes the PATHs absolute and clean.
func dedupRequest(args []string, f dedupFlags) (api.DedupRequest, error) {
	min, err := parseSize(f.minSize)
	if err != nil {
		return api.DedupRequest{}, &exitError{Code: exitUsage, Err: fmt.Errorf("dedup: --min-size: %w", err)}
	}
	if f.asJSON && f.nul {
		return api.DedupRequest{}, &exitError{Code: exitUsage, Err: errors.New("dedup: give --json or -z, not both")}
	}
	req := api.DedupRequest{DryRun: f.dry, Hardlink: f.hardlink, MinSize: min, Groups: dedupShown}
	if f.asJSON || f.nul || (f.trash && f.dry) {
		req.Groups = -1
	}
	cwd, err := os.Getwd()
	if err != nil {
		return req, &exitError{Code: exitFailure, Err: fmt.Errorf("dedup: current directory: %w", err)}
	}
	if err := keepRequest(&req, f, cwd); err != nil {
		return req, err
	}
	for _, a := range args {
		if a == "" {
			return req, &exitError{Code: exitUsage, Err: errors.New(`dedup: an empty PATH (an unset variable?); give "." for the current directory`)}
		}
		req.Paths = append(req.Paths, absPath([]byte(a), cwd))
	}
	return req, nil
}

// dedupPrinter shows a run's events as they come.
type dedupPrinter struct {
	flags  dedupFlags
	out    *bufio.Writer // the plan, groups and result; JSON; -z paths
	info   io.Writer     // the plan and result for people: out, or stderr with -z
	stderr io.Writer
	bar    *progressBar // nil without a terminal

	plan     *api.DedupPlan
	shown    int  // groups printed
	noted    bool // the groups not printed were counted
	skips    []api.DedupSkip
	lastDraw time.Time
	stopped  atomic.Bool // the user asked to stop
	buf      []byte
}

func (p *dedupPrinter) event(ev api.DedupEvent) error {
	if ev.Progress == nil {
		p.bar.clear()
	}
	if ev.Group == nil && ev.Plan == nil {
		p.noteMore()
	}
	if p.flags.asJSON {
		p.buf = append(ev.AppendJSON(p.buf[:0]), '\n')
		_, err := p.out.Write(p.buf)
		if ev.Plan != nil {
			p.warnUnsupported(*ev.Plan)
		}
		return err
	}
	switch {
	case ev.Plan != nil:
		p.plan = ev.Plan
		p.printPlan(*ev.Plan)
	case ev.Group != nil:
		p.printGroup(*ev.Group)
	case ev.Progress != nil:
		p.drawBar(*ev.Progress)
	case ev.Skip != nil:
		p.skips = append(p.skips, *ev.Skip)
	}
	return nil
}

func (p *dedupPrinter) printPlan(pl api.DedupPlan) {
	var notes []string
	if pl.AlreadyShared > 0 {
		notes = append(notes, groupDigits(int64(pl.AlreadyShared))+" already shared")
	}
	if pl.NoBlocks > 0 {
		notes = append(notes, groupDigits(int64(pl.NoBlocks))+" without blocks of their own")
	}
	mode := strings.Join(append([]string{pl.Mode}, notes...), "; ")
	if pl.Actions == 0 {
		fmt.Fprintf(p.info, "nothing to free (%s)\n", mode)
	} else {
		fmt.Fprintf(p.info, "will free %s: %s %s in %s %s (%s)\n", humanBytes(pl.Frees),
			groupDigits(int64(pl.Actions)), plural(int64(pl.Actions), "file", "files"),
			groupDigits(int64(pl.Groups)), plural(int64(pl.Groups), "group", "groups"), mode)
	}
	p.warnUnsupported(pl)
}

// warnUnsupported names on stderr each file system that cannot share
// extents, and the alternative.
func (p *dedupPrinter) warnUnsupported(pl api.DedupPlan) {
	p.out.Flush()
	for _, u := range pl.Unsupported {
		fmt.Fprintf(p.stderr, "annexctl: dedup: %s cannot share extents (holding %s: %s): %s %s in %s %s left as they are; "+
			"--hardlink links duplicates instead (the names then share one inode and its metadata)\n",
			u.FS, u.Path, u.Error, groupDigits(int64(u.Actions)), plural(int64(u.Actions), "file", "files"),
			groupDigits(int64(u.Groups)), plural(int64(u.Groups), "group", "groups"))
	}
}

func (p *dedupPrinter) printGroup(g api.DedupGroup) {
	p.shown++
	if p.flags.nul {
		p.buf = append(append(p.buf[:0], g.Keeper...), 0)
		for _, t := range g.Targets {
			p.buf = append(append(p.buf, t...), 0)
		}
		p.out.Write(append(p.buf, 0))
		return
	}
	p.buf = fmt.Appendf(p.buf[:0], "  %9s  ", humanBytes(g.Frees))
	p.buf = append(append(p.buf, g.Keeper...), " ← "...)
	for i, t := range g.Targets {
		if i == 3 && !p.flags.trash {
			p.buf = fmt.Appendf(p.buf, " (+%d more)", len(g.Targets)-i)
			break
		}
		if i > 0 {
			p.buf = append(p.buf, ", "...)
		}
		p.buf = append(p.buf, t...)
	}
	if len(g.Trash) > 0 {
		p.buf = append(append(p.buf, " → "...), g.Trash...)
	}
	p.out.Write(append(p.buf, '\n'))
}

// noteMore counts the groups of the plan that were not printed, once.
func (p *dedupPrinter) noteMore() {
	if p.noted || p.plan == nil || p.flags.asJSON || p.flags.nul {
		return
	}
	p.noted = true
	if more := p.plan.Groups - p.shown; more > 0 && p.shown > 0 {
		fmt.Fprintf(p.out, "  … and %s more %s\n", groupDigits(int64(more)), plural(int64(more), "group", "groups"))
	}
}

// drawBar redraws the progress line, at most five times a second.
func (p *dedupPrinter) drawBar(pr api.DedupProgress) {
	if p.bar == nil || time.Since(p.lastDraw) < 200*time.Millisecond {
		return
	}
	p.out.Flush()
	p.lastDraw = time.Now()
	p.bar.draw(dedupBarLine(pr))
}

// dedupBarLine is one progress line of a run: the files done of those
// planned, and the bytes freed.
func dedupBarLine(pr api.DedupProgress) string {
	frac := 0.0
	if pr.Total > 0 {
		frac = min(float64(pr.Done)/float64(pr.Total), 1)
	}
	return meter(frac) + fmt.Sprintf("%s of %s files, freed %s",
		groupDigits(int64(pr.Done)), groupDigits(int64(pr.Total)), humanBytes(pr.Freed))
}

// interrupts stops the run at the first signal, and leaves at the second.
func (p *dedupPrinter) interrupts(ctx context.Context, sig <-chan os.Signal, stop chan<- struct{}, cancel func()) {
	select {
	case <-sig:
	case <-ctx.Done():
		return
	}
	p.stopped.Store(true)
	close(stop)
	p.bar.clear()
	fmt.Fprintln(p.stderr, "annexctl: dedup: stopping after the actions under way (Ctrl-C again to leave at once)")
	select {
	case <-sig:
		cancel()
	case <-ctx.Done():
	}
}

// finish prints the result and picks the exit status.
func (p *dedupPrinter) finish(c *api.Client, end api.DedupEnd, err error) error {
	var se *api.StatusError
	switch {
	case err == nil, errors.Is(err, api.ErrUnsupported), errors.Is(err, api.ErrInterrupted):
	case errors.As(err, &se) && se.Status == 400:
		return &exitError{Code: exitUsage, Err: fmt.Errorf("dedup: %s (nothing was done)", strings.TrimPrefix(se.Message, "api: "))}
	case errors.Is(err, context.Canceled) && p.stopped.Load():
		p.out.Flush()
		return &exitError{Code: exitFailure, Err: errors.New("dedup: left before the daemon's answer; it stops after the actions under way")}
	default:
		p.out.Flush()
		return apiFailure(c, err)
	}
	p.noteMore()
	if errors.Is(err, api.ErrInterrupted) && !p.stopped.Load() {
		fmt.Fprintln(p.stderr, "annexctl: dedup: the daemon stopped the run before its end (is it shutting down?)")
	}
	if p.flags.asJSON {
		_ = writeJSON(p.out, end) // a failed write shows at the flush below
	} else if end.Result != nil {
		p.printResult(*end.Result, errors.Is(err, api.ErrInterrupted))
	}
	if ferr := flushOut(p.out); ferr != nil {
		return ferr
	}
	if err != nil || (end.Result != nil && len(end.Result.Skipped) > 0) {
		return &exitError{Code: exitFailure}
	}
	return nil
}

func (p *dedupPrinter) printResult(r api.DedupResult, interrupted bool) {
	if p.plan == nil && interrupted {
		fmt.Fprintln(p.info, "stopped before the plan was made: nothing was done")
		return
	}
	if r.DryRun || p.plan == nil || (p.plan.Actions == 0 && !interrupted) {
		return
	}
	verb := "freed"
	if interrupted {
		verb = "stopped early: freed"
	}
	fmt.Fprintf(p.info, "%s %s in %s of %s %s (%.1f s)\n", verb, humanBytes(r.Freed), groupDigits(int64(r.Done)),
		groupDigits(int64(r.Planned)), plural(int64(r.Planned), "file", "files"), r.Seconds)
	if len(r.Skipped) == 0 {
		return
	}
	reasons := make([]string, 0, len(r.Skipped))
	n := 0
	for reason, k := range r.Skipped {
		reasons = append(reasons, fmt.Sprintf("%s %s", reason, groupDigits(int64(k))))
		n += k
	}
	slices.Sort(reasons)
	fmt.Fprintf(p.info, "skipped %s: %s\n", groupDigits(int64(n)), strings.Join(reasons, ", "))
	for _, s := range p.skips {
		line := fmt.Appendf(nil, "  %s  ", s.Reason)
		line = append(append(line, s.Target...), " (keeper "...)
		line = append(append(line, s.Keeper...), ')')
		if s.Detail != "" {
			line = append(append(line, ": "...), s.Detail...)
		}
		p.info.Write(append(line, '\n'))
	}
}

// printDedupStatus writes the deduplication lines of status.
func printDedupStatus(w io.Writer, d *api.DedupStatus) {
	if d == nil {
		return
	}
	bg := "continuous off"
	if d.Continuous {
		bg = fmt.Sprintf("continuous on, %s pending", groupDigits(int64(d.Pending)))
		if d.Paused != "" {
			bg += ", paused: " + d.Paused
		}
	}
	fmt.Fprintf(w, "dedup:   freed %s in %s %s since start (%s %s asked); %s\n", humanBytes(d.FreedBytes),
		groupDigits(d.Pairs), plural(d.Pairs, "file", "files"), groupDigits(d.Runs), plural(d.Runs, "run", "runs"), bg)
	if len(d.Skipped) == 0 {
		return
	}
	var n int64
	reasons := make([]string, 0, len(d.Skipped))
	for r, k := range d.Skipped {
		reasons = append(reasons, r+" "+groupDigits(k))
		n += k
	}
	slices.Sort(reasons)
	fmt.Fprintf(w, "         skipped %s: %s\n", groupDigits(n), strings.Join(reasons, ", "))
}
