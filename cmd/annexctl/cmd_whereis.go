package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
)

func newWhereisCmd() *cobra.Command {
	var asJSON, nul, wait, hosts bool
	cmd := &cobra.Command{
		Use:   "whereis KEY|FILE",
		Short: "List every indexed file with the same content as KEY or FILE",
		Long: `List every indexed file whose content is that of KEY (a git-annex key such
as SHA256E-s1024--…) or of FILE (its current key), one path per line.
Duplicates are matched by digest, so a.JPG and b.jpg with the same bytes
are listed together. A path whose file changed since it was indexed is
named on stderr as "changed since indexed"; one outside the daemon's roots
(left from a run with other roots, not checked since) as "outside the
roots".

An argument that parses as a key and does not name an existing file is a
key; anything else is a file. Exit status 1 when nothing is found.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if hosts {
				return whereisHosts(cmd, args, asJSON, wait) // cmd_whereis_hosts.go
			}
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			out := bufio.NewWriter(cmd.OutOrStdout())
			n := 0
			print := func(l api.Location) error {
				n++
				if asJSON {
					_, err := out.Write(append(l.AppendJSON(nil), '\n'))
					return err
				}
				if l.Stale {
					out.Flush()
					fmt.Fprintf(cmd.ErrOrStderr(), "annexctl: %s: changed since indexed\n", l.Path)
				}
				if l.OutsideRoots {
					out.Flush()
					fmt.Fprintf(cmd.ErrOrStderr(), "annexctl: %s: outside the roots: not checked since an earlier run (annexctl forget drops it)\n", l.Path)
				}
				out.Write(l.Path)
				if nul {
					return out.WriteByte(0)
				}
				return out.WriteByte('\n')
			}
			arg := args[0]
			if k, err := key.Parse(arg); err == nil && !exists(arg) {
				err = c.WhereisKey(cmd.Context(), k, print)
				return whereisDone(out, whereisResult(c, err, n, arg))
			}
			cwd, err := os.Getwd()
			if err != nil {
				return &exitError{Code: exitFailure, Err: fmt.Errorf("whereis: current directory: %w", err)}
			}
			p := absPath([]byte(arg), cwd)
			err = c.WhereisPath(cmd.Context(), p, wait, print)
			if errors.Is(err, api.ErrOutsideRoots) {
				if q := resolveDir(p); q != nil {
					err = c.WhereisPath(cmd.Context(), q, wait, print)
				}
			}
			return whereisDone(out, whereisResult(c, err, n, arg))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per location (see docs/cli.md)")
	cmd.Flags().BoolVarP(&nul, "nul", "z", false, "end each path with NUL instead of a newline")
	cmd.Flags().BoolVar(&wait, "wait", false, "for FILE: wait until it is indexed if it is new or changed")
	cmd.Flags().BoolVar(&hosts, "hosts", false, "list which machines hold the content, as the hub knows them (see docs/cli.md)")
	return cmd
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// whereisDone flushes what was listed; a failed write is an error too.
func whereisDone(out *bufio.Writer, err error) error {
	if ferr := flushOut(out); err == nil {
		return ferr
	}
	return err
}

func whereisResult(c *api.Client, err error, n int, arg string) error {
	var se *api.StatusError
	switch {
	case err == nil && n == 0:
		return &exitError{Code: exitFailure, Err: fmt.Errorf("whereis: %s: no indexed file has this content", arg)}
	case err == nil:
		return nil
	case errors.As(err, &se) && (se.Status == 400 || se.Status == 404):
		return &exitError{Code: exitFailure, Err: fmt.Errorf("whereis: %s: %s", arg, strings.TrimPrefix(se.Message, "api: "))}
	}
	return apiFailure(c, err)
}
