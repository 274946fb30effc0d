package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/store"
)

func newCompactCmd() *cobra.Command {
	var index string
	cmd := &cobra.Command{
		Use:   "compact [--index PATH]",
		Short: "Rewrite the index without free pages (stop the daemon first)",
		Long: "compact checks the index, copies its live data into a new file next to it, checks\n" +
			"the copy and renames it over the old one, so a crash at any point leaves one whole\n" +
			"index. It needs room for a second copy of the live data, and the daemon stopped.\n" +
			"Exit status: 0 compacted, 1 failed (the old index is kept), 2 the index could not be opened.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCompact(cmd.OutOrStdout(), index)
		},
	}
	cmd.Flags().StringVar(&index, "index", "", "index file (default $XDG_STATE_HOME/annexd/index.db)")
	return cmd
}

func runCompact(out io.Writer, index string) error {
	if index == "" {
		p, err := config.DefaultIndexPath()
		if err != nil {
			return &exitError{Code: exitUsage, Err: err}
		}
		index = p
	}
	res, err := store.Compact(index, store.Options{})
	switch {
	case errors.Is(err, store.ErrLocked):
		return &exitError{Code: exitUsage, Err: fmt.Errorf("%w (stop annexd first: it holds the index while it runs)", err)}
	case errors.Is(err, store.ErrNoIndex), errors.Is(err, store.ErrNotIndex), errors.Is(err, store.ErrNewerSchema):
		return &exitError{Code: exitUsage, Err: err}
	case err != nil && res.Replaced: // only syncing the directory failed
		return &exitError{Code: exitFailure, Err: err}
	case err != nil:
		return &exitError{Code: exitFailure, Err: fmt.Errorf("%w (the old index is kept)", err)}
	}
	fmt.Fprintf(out, "%s: %d files; %s → %s on disk\n", index, res.Files, mib(res.Before), mib(res.After))
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
