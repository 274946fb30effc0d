package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/store"
)

// Exit codes of check-db.
const (
	exitCheckProblems = 1 // the index opened but the check found problems
	exitCheckNoOpen   = 2 // the index could not be opened
)

func newCheckDBCmd() *cobra.Command {
	var (
		index  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "check-db [--index PATH] [--json]",
		Short: "Check the index: bbolt's consistency check and annexd's own invariants",
		Long: "check-db opens the index read-only (stop the daemon first: it holds the index), " +
			"runs bbolt's consistency check and annexd's invariants, and prints what it finds.\n" +
			"Exit status: 0 clean, 1 problems found, 2 the index could not be opened.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCheckDB(cmd.OutOrStdout(), index, asJSON)
		},
	}
	cmd.Flags().StringVar(&index, "index", "", "index file (default $XDG_STATE_HOME/annexd/index.db)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	return cmd
}

func runCheckDB(out io.Writer, index string, asJSON bool) error {
	if index == "" {
		p, err := config.DefaultIndexPath()
		if err != nil {
			return &exitError{Code: exitCheckNoOpen, Err: err}
		}
		index = p
	}
	s, err := store.Open(index, store.Options{ReadOnly: true})
	if errors.Is(err, store.ErrLocked) {
		err = fmt.Errorf("%w (stop annexd first: it holds the index while it runs)", err)
	}
	if err != nil {
		return &exitError{Code: exitCheckNoOpen, Err: err}
	}
	rep, err := s.Check()
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &exitError{Code: exitCheckNoOpen, Err: err}
	}
	if rep.Problems == nil {
		rep.Problems = []string{}
	}
	if asJSON {
		if err := json.NewEncoder(out).Encode(rep); err != nil {
			return &exitError{Code: exitFailure, Err: err}
		}
	} else {
		printReport(out, &rep)
	}
	if !rep.OK() {
		return &exitError{Code: exitCheckProblems}
	}
	return nil
}

func printReport(out io.Writer, rep *store.Report) {
	fmt.Fprintf(out, "%s: %d files in %d directories, %d digests, %d duplicate groups\n",
		rep.Path, rep.Files, rep.Dirs, rep.Digests, rep.Groups)
	for _, p := range rep.Problems {
		fmt.Fprintln(out, "problem:", p)
	}
	if rep.Omitted > 0 {
		fmt.Fprintf(out, "… and %d more problems\n", rep.Omitted)
	}
	if rep.OK() {
		fmt.Fprintln(out, "ok")
	} else {
		fmt.Fprintf(out, "%d problems\n", len(rep.Problems)+rep.Omitted)
	}
}
