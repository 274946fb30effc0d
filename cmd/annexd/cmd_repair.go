package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/annexd/annexd/internal/daemon"
	"github.com/annexd/annexd/store"
)

// exitDamaged: the index is damaged; annexd repair rebuilds it.
const exitDamaged = 4

// newRepairCmd makes the repair command. It takes the daemon's own flags,
// which root defines and f receives.
func newRepairCmd(root *cobra.Command, f *runFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "repair [flags] [ROOT...]",
		Short: "Move a damaged index aside and build a new one from the files",
		Long: `repair renames the index to INDEX.damaged-TIME beside it, never deleting it,
then indexes the files under each ROOT into a new index, as a first start
does, and exits. The old index's hashing calibration is kept when it is
still readable. Stop annexd first, give repair the flags and roots you give
annexd, and start annexd as usual afterwards.

Exit status: 0 rebuilt; 1 the rebuild failed or was interrupted (annexd
finishes it when it starts); 2 bad flags or roots, an index in use, or a
file that is not an annexd index (left alone).`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runRepair(cmd, args, f) },
	}
	cmd.Flags().AddFlagSet(root.Flags())
	return cmd
}

func runRepair(cmd *cobra.Command, args []string, f *runFlags) error {
	cfg, err := loadConfig(cmd, args, f)
	if err != nil {
		return &exitError{Code: exitUsage, Err: err}
	}
	if len(cfg.Roots) == 0 {
		return &exitError{Code: exitUsage, Err: errors.New("repair: no directory to index: give the roots you give annexd")}
	}
	log := newLogger(cmd.ErrOrStderr(), cfg)
	app, err := daemon.New(cfg, log, daemon.Options{Version: version()})
	if err != nil {
		return &exitError{Code: exitUsage, Err: err}
	}
	ctx, stop := signalContext(cmd.Context(), log)
	defer stop()
	r, err := app.Repair(ctx)
	switch {
	case errors.Is(err, store.ErrLocked):
		return &exitError{Code: exitUsage, Err: fmt.Errorf("repair: %w", err)}
	case errors.Is(err, store.ErrNotIndex):
		return &exitError{Code: exitUsage, Err: fmt.Errorf("repair: %w; repair moves only annexd indexes", err)}
	case err != nil && r.Aside != "":
		return &exitError{Code: exitFailure, Err: fmt.Errorf("repair: %w (the old index is kept at %s)", err, r.Aside)}
	case err != nil:
		return &exitError{Code: exitFailure, Err: fmt.Errorf("repair: %w", err)}
	}
	out := cmd.OutOrStdout()
	if r.Aside != "" {
		fmt.Fprintf(out, "moved the old index to %s\n  (kept as it was; delete it once you no longer need it)\n", r.Aside)
	}
	kept := ""
	if r.KeptCalibration {
		kept = "; hashing calibration kept"
	}
	if !r.Done {
		return &exitError{Code: exitFailure, Err: fmt.Errorf("repair interrupted: %s holds %d files so far; annexd finishes the scan when it starts", cfg.Index, r.Files)}
	}
	fmt.Fprintf(out, "indexed %d files into %s in %s%s\n", r.Files, cfg.Index, r.Took.Round(time.Millisecond), kept)
	return nil
}

// signalContext returns a context that SIGINT or SIGTERM cancels; a
// second signal kills the process.
func signalContext(parent context.Context, log *slog.Logger) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-sigs:
			log.Info("signal received; flushing and exiting", "signal", s.String())
			cancel()
		case <-ctx.Done():
		}
		signal.Stop(sigs)
	}()
	return ctx, func() { signal.Stop(sigs); cancel() }
}

// damaged is the exit of a run that found the index damaged: what was
// found, and the repair command with this run's flags and roots.
func damaged(err error, cmd *cobra.Command, args []string) error {
	return &exitError{Code: exitDamaged, Err: fmt.Errorf("%w\n"+
		"The index is damaged: annexd neither serves nor writes it. Rebuild it from your files with\n"+
		"  %s\n"+
		"which renames the damaged file and keeps it beside the new index", err, repairCommand(cmd, args))}
}

// repairCommand is the annexd repair command line with the flags and
// arguments of this run.
func repairCommand(cmd *cobra.Command, args []string) string {
	parts := []string{"annexd", "repair"}
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		switch v := fl.Value.(type) {
		case pflag.SliceValue:
			for _, s := range v.GetSlice() {
				parts = append(parts, "--"+fl.Name+"="+shellQuote(s))
			}
		default:
			if fl.Value.Type() == "bool" && fl.Value.String() == "true" {
				parts = append(parts, "--"+fl.Name)
			} else {
				parts = append(parts, "--"+fl.Name+"="+shellQuote(fl.Value.String()))
			}
		}
	})
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellQuote quotes s for a POSIX shell unless it needs no quotes.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
