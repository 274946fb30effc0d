package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
)

func newCopiesCmd() *cobra.Command {
	var (
		asJSON, exact, all bool
		fewer, limit       int
	)
	cmd := &cobra.Command{
		Use:   "copies [--fewer-than N] [PATH] [--all-hosts] [--bytes] [--json]",
		Short: "List content held by fewer than N hosts: what a disk failure would lose",
		Long: `List the content of this host's files (at or below PATH, default all of
them) that fewer than N hosts hold, as the daemon's hub knows them: with
the default N = 2, what exists on this machine alone. Each content is a
header line (size, hosts, key) followed by its hosts and their paths.
Copies on a stale host (not heard from for longer than the hub's
stale_after) are shown, marked STALE, and not counted.

--all-hosts asks about everything the hub knows, whoever holds it.

Exit status 1 when any content is listed, 0 when none, so that
"annexctl copies ~/Photos || alert" warns of files at risk.`,
		Example: `  annexctl copies ~/Photos            files on this machine alone
  annexctl copies --fewer-than 3 --all-hosts`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := api.HubCopiesQuery{FewerThan: fewer, AllHosts: all, Limit: limit}
			switch {
			case fewer < 1:
				return &exitError{Code: exitUsage, Err: errors.New("copies: --fewer-than must be at least 1")}
			case limit < 0:
				return &exitError{Code: exitUsage, Err: errors.New("copies: --limit must not be negative")}
			case all && len(args) > 0:
				return &exitError{Code: exitUsage, Err: errors.New("copies: --all-hosts covers every host's files; give no PATH with it")}
			}
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			if len(args) > 0 {
				cwd, err := os.Getwd()
				if err != nil {
					return &exitError{Code: exitFailure, Err: fmt.Errorf("copies: current directory: %w", err)}
				}
				q.Path = absPath([]byte(args[0]), cwd)
			}
			return copies(cmd, c, q, asJSON, sizeFormat(exact))
		},
	}
	f := cmd.Flags()
	f.IntVar(&fewer, "fewer-than", 2, "list content held by fewer than this many hosts that are not stale")
	f.BoolVar(&all, "all-hosts", false, "ask about every content the hub knows, not only this host's")
	f.IntVar(&limit, "limit", 0, "at most this many contents (0: all)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per content (see docs/cli.md)")
	f.BoolVar(&exact, "bytes", false, "print sizes in bytes")
	return cmd
}

func copies(cmd *cobra.Command, c *api.Client, q api.HubCopiesQuery, asJSON bool, size func(int64) string) error {
	out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	var n, bytes int64
	buf := make([]byte, 0, 4096)
	list := func(q api.HubCopiesQuery) error {
		_, err := c.HubCopies(cmd.Context(), q, func(hc api.HubContent) error {
			n++
			bytes += hc.Size
			buf = appendHub(buf[:0], hc, asJSON, n > 1, size)
			_, err := out.Write(buf)
			return err
		})
		return err
	}
	err := list(q)
	if errors.Is(err, api.ErrOutsideRoots) && n == 0 {
		if p := resolveDir(q.Path); p != nil {
			q.Path = p
			err = list(q)
		}
	}
	if err != nil {
		out.Flush()
		return hubFailure(c, "copies", err)
	}
	if !asJSON {
		if n > 0 {
			out.WriteByte('\n')
		}
		fmt.Fprintf(out, "%s %s, %s, held by fewer than %d %s\n", groupDigits(n), plural(n, "content", "contents"),
			size(bytes), q.FewerThan, plural(int64(q.FewerThan), "host", "hosts"))
	}
	if err := flushOut(out); err != nil {
		return err
	}
	if n > 0 {
		return &exitError{Code: exitFailure} // the list says it all
	}
	return nil
}
