package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/hasher/calibrate"
)

func newCalibrateCmd() *cobra.Command {
	var asJSON bool
	var budget time.Duration
	cmd := &cobra.Command{
		Use:   "calibrate [--json] [--budget DURATION]",
		Short: "Measure the ways of hashing on this machine and print the policy chosen",
		Long: `calibrate runs the hashing calibration the daemon runs at start (at most 1 s):
it checks every SHA-256 candidate on known-answer vectors (crypto/sha256,
the multi-buffer kernels this CPU runs, sha256sum, openssl), measures their throughput and overheads,
the per-file cost of small files and the worker pool's hand-off, and prints
every figure, every rejected candidate with the reason, and the policy
derived from them. The daemon stores the result and measures again only when
the CPU, Go version or an external program changes, or when the last
calibration was cut short by its time budget. --budget gives this command a
longer budget than the daemon's, for a calibration that a loaded machine does
not cut short.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := calibrate.Run(cmd.Context(), calibrate.Options{Budget: budget})
			if err != nil {
				return &exitError{Code: exitFailure, Err: fmt.Errorf("calibrate: %w", err)}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(c)
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), c.String())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the calibration as one JSON object")
	cmd.Flags().DurationVar(&budget, "budget", calibrate.DefaultBudget, "the most time the calibration may take")
	return cmd
}
