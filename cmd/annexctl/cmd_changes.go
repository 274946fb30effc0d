package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
)

// exitResync: the changes after the cursor are no longer kept, or the
// index was rebuilt (changes).
const exitResync = 7

// followWait is how long one long poll of --follow waits for a change.
const followWait = 30 * time.Second

type changesOpts struct {
	since             string
	now, follow, json bool
	nul               bool
	limit             int
}

func newChangesCmd() *cobra.Command {
	var o changesOpts
	cmd := &cobra.Command{
		Use:   "changes (--since CURSOR [--follow] [--json | -z] | --now)",
		Short: "List every change to the index after a cursor",
		Long: `List every change to the index after CURSOR, oldest first, one per line:
the cursor of the change, its kind (add, edit, delete, move, rot,
unreadable, healed), the key the path held before and the key it holds
now ("-" for none), the path, and for a move the path it came from.
Rot is bytes that changed with no write (an audit's or the indexer's
finding: corrupt, lost_write, untraced): not an edit, never to be backed
up as one. A rename is one move, not a delete and an add.

--now prints the current cursor; a script starts from it and keeps the
cursor of the last change it handled (every change's line starts with
it). The feed survives restarts. When the changes after CURSOR are no
longer kept ([changes] keep and max_age bound them), or the index was
rebuilt, the exit status is 7: take the whole index again, then go on
from --now.

--follow goes on listing changes as they are made, until Ctrl-C.`,
		Example: `  cursor=$(annexctl changes --now)
  annexctl changes --since "$cursor" --json
  annexctl changes --since "$cursor" --follow -z | xargs -0 -n6 echo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			return runChanges(cmd, c, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.since, "since", "", `list the changes after CURSOR ("ID:SEQ" as --now and each change print it; "now": print the current cursor)`)
	f.BoolVar(&o.now, "now", false, "print the current cursor and exit")
	f.BoolVar(&o.follow, "follow", false, "go on listing changes as they are made, until Ctrl-C")
	f.BoolVar(&o.json, "json", false, "print one JSON object per change (see docs/cli.md)")
	f.BoolVarP(&o.nul, "nul", "z", false, "end every field with NUL, six fields a change (the last, the old path, empty but for a move)")
	f.IntVar(&o.limit, "limit", 0, "changes asked for in one request (default: the daemon's, 1000)")
	return cmd
}

// check refuses flags that do not go together.
func (o *changesOpts) check() error {
	if o.since == "now" {
		o.since, o.now = "", true
	}
	var err error
	switch {
	case o.now && o.since != "":
		err = errors.New("changes: give --since CURSOR or --now, not both")
	case !o.now && o.since == "":
		err = errors.New("changes: give --since CURSOR, or --now for the current cursor")
	case o.now && o.follow:
		err = errors.New("changes: --follow needs --since CURSOR (start from the one --now prints)")
	case o.json && o.nul:
		err = errors.New("changes: give --json or -z, not both")
	case o.limit < 0:
		err = errors.New("changes: --limit must be ≥ 1")
	}
	if err != nil {
		return &exitError{Code: exitUsage, Err: err}
	}
	return nil
}

func runChanges(cmd *cobra.Command, c *api.Client, o changesOpts) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := bufio.NewWriter(cmd.OutOrStdout())
	if o.now {
		p, err := c.Changes(ctx, api.ChangesQuery{})
		if err != nil {
			return changesFailure(c, err, "")
		}
		if o.json {
			err = writeJSON(out, struct {
				Cursor string `json:"cursor"`
			}{p.Cursor})
		} else {
			_, err = fmt.Fprintln(out, p.Cursor)
		}
		if err != nil {
			return &exitError{Code: exitFailure, Err: fmt.Errorf("write output: %w", err)}
		}
		return flushOut(out)
	}
	since, err := api.ParseCursor(o.since)
	if err != nil {
		return &exitError{Code: exitUsage, Err: fmt.Errorf("changes: %s", trimAPI(err))}
	}
	err = listChanges(ctx, c, o, since, out)
	if ctx.Err() != nil && cmd.Context().Err() == nil {
		return flushOut(out) // Ctrl-C ends --follow: not a failure
	}
	return err
}

// listChanges prints the pages after since: all kept, and with
// o.follow every later one.
func listChanges(ctx context.Context, c *api.Client, o changesOpts, since api.Cursor, out *bufio.Writer) error {
	q := api.ChangesQuery{Since: since, Limit: o.limit}
	for {
		if o.follow {
			q.Wait = followWait
		}
		p, err := c.Changes(ctx, q)
		if err != nil {
			return changesFailure(c, err, q.Since.String())
		}
		for i := range p.Changes {
			if err := printChange(out, &p.Changes[i], o); err != nil {
				return err
			}
		}
		if err := flushOut(out); err != nil {
			return err
		}
		if !p.More && !o.follow {
			return nil
		}
		if q.Since, err = api.ParseCursor(p.Cursor); err != nil {
			return &exitError{Code: exitFailure, Err: fmt.Errorf("changes: the daemon's cursor: %v", err)}
		}
	}
}

// changesFailure is the exit of a failed request: 7 for a resync.
func changesFailure(c *api.Client, err error, since string) error {
	if errors.Is(err, api.ErrResync) {
		return &exitError{Code: exitResync, Err: fmt.Errorf(
			"changes: the changes after %s are no longer kept, or the index was rebuilt (%s): take the whole index again, then go on from `annexctl changes --now`",
			since, trimAPI(err))}
	}
	return apiFailure(c, err)
}

func trimAPI(err error) string {
	s := err.Error()
	for _, p := range []string{api.ErrResync.Error() + ": ", api.ErrBadRequest.Error() + ": "} {
		s = strings.TrimPrefix(s, p)
	}
	return s
}

// printChange writes one change as --json, -z or a tab-separated line.
func printChange(out *bufio.Writer, ch *api.Change, o changesOpts) error {
	if o.json {
		return writeJSON(out, ch)
	}
	kind := ch.Kind
	if ch.Finding != "" {
		kind += ":" + ch.Finding
	}
	fields := [][]byte{[]byte(ch.Cursor), []byte(kind), []byte(orDash(ch.OldKey)), []byte(orDash(ch.NewKey)), ch.RawPath()}
	if o.nul {
		fields = append(fields, ch.RawFrom())
	} else if ch.From != "" {
		fields = append(fields, ch.RawFrom())
	}
	sep, end := byte('\t'), byte('\n')
	if o.nul {
		sep, end = 0, 0
	}
	for i, f := range fields {
		out.Write(f)
		if i < len(fields)-1 {
			out.WriteByte(sep)
		}
	}
	return out.WriteByte(end)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
