package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/roots"
)

func newForgetCmd() *cobra.Command {
	var dry, asJSON bool
	cmd := &cobra.Command{
		Use:   "forget [--dry-run] [--json] DIR...",
		Short: "Drop the index's records at or below DIR that are outside the daemon's roots",
		Long: `Drop from the index every record at or below each DIR that is outside the
daemon's roots: records left from runs with other roots, which nothing
watches or re-checks any more (annexctl status lists them). Files on disk
are not touched. A DIR that holds roots keeps their records. Relative DIRs
are resolved against the current directory; symlinks are not followed.

A DIR at or below one of the roots is refused (its records would come back
at the next scan), and so is an empty DIR (give "." for the current
directory): exit status 2, and nothing is dropped, for any DIR.
--dry-run prints what would be dropped. Exit status 1 when a DIR has no
records to drop.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cwd, err := os.Getwd()
			if err != nil {
				return &exitError{Code: exitFailure, Err: fmt.Errorf("forget: current directory: %w", err)}
			}
			dirs, err := forgetDirs(args, cwd)
			if err != nil {
				return err
			}
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			// Every DIR is checked (and counted) before anything is dropped.
			res, err := forgetAll(cmd, c, dirs, true)
			if err == nil && !dry {
				res, err = forgetAll(cmd, c, dirs, false)
			}
			if err != nil {
				return err
			}
			return printForget(cmd, res, asJSON)
		},
	}
	cmd.Flags().BoolVarP(&dry, "dry-run", "n", false, "only print how many records would be dropped")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per DIR (see docs/cli.md)")
	return cmd
}

// forgetDirs makes the DIR arguments absolute and leaves out those at or
// below another one given, which covers them (counted once, and not "no
// records" after it). An empty one is refused: it would stand for the
// current directory, and an unset shell variable must not drop the records
// there.
func forgetDirs(args []string, cwd string) ([][]byte, error) {
	all := make([][]byte, len(args))
	for i, a := range args {
		if a == "" {
			return nil, &exitError{Code: exitUsage, Err: errors.New(`forget: an empty DIR (an unset variable?); give "." for the current directory (nothing was dropped)`)}
		}
		all[i] = absPath([]byte(a), cwd)
	}
	var dirs [][]byte
	for i, d := range all {
		if !coveredBy(d, all, i) {
			dirs = append(dirs, d)
		}
	}
	return dirs, nil
}

// coveredBy reports whether dirs other than dirs[i] hold d: one above it,
// or an earlier copy of it.
func coveredBy(d []byte, dirs [][]byte, i int) bool {
	for j, o := range dirs {
		switch {
		case j == i:
		case bytes.Equal(o, d):
			if j < i {
				return true
			}
		case roots.Within(string(d), string(o)):
			return true
		}
	}
	return false
}

// forgetAll asks the daemon to forget each dir; the first refusal stops it.
func forgetAll(cmd *cobra.Command, c *api.Client, dirs [][]byte, dry bool) ([]api.ForgetResult, error) {
	var out []api.ForgetResult
	for _, d := range dirs {
		r, err := c.Forget(cmd.Context(), d, dry)
		var se *api.StatusError
		switch {
		case err == nil:
			out = append(out, r)
		case errors.As(err, &se) && se.Status == 400:
			what := "nothing was dropped"
			if !dry {
				what = "the DIRs before it were dropped"
			}
			return nil, &exitError{Code: exitUsage, Err: fmt.Errorf("forget: %s (%s)", strings.TrimPrefix(se.Message, "api: "), what)}
		default:
			return nil, apiFailure(c, err)
		}
	}
	return out, nil
}

// printForget reports each result; a DIR without records is exit 1.
func printForget(cmd *cobra.Command, res []api.ForgetResult, asJSON bool) error {
	out := bufio.NewWriter(cmd.OutOrStdout())
	empty := 0
	for _, r := range res {
		if r.Files == 0 {
			empty++
			out.Flush()
			fmt.Fprintf(cmd.ErrOrStderr(), "annexctl: forget: %s: no records outside the roots at or below it\n", r.Path)
		}
		if asJSON {
			b, err := r.MarshalJSON()
			if err != nil {
				return &exitError{Code: exitFailure, Err: err}
			}
			out.Write(append(b, '\n'))
			continue
		}
		if r.Files == 0 {
			continue
		}
		verb := "forgot"
		if r.DryRun {
			verb = "would forget"
		}
		fmt.Fprintf(out, "%s %s %s at or below %s", verb, groupDigits(r.Files), plural(r.Files, "record", "records"), r.Path)
		if len(r.Kept) > 0 {
			fmt.Fprintf(out, " (keeping the roots %s)", strings.Join(r.Kept, ", "))
		}
		fmt.Fprintln(out)
	}
	if err := flushOut(out); err != nil {
		return err
	}
	if empty > 0 {
		return &exitError{Code: exitFailure}
	}
	return nil
}
