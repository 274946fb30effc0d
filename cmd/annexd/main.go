// An idle daemon must not wake: the runtime's check of the CPU limit
// every second is left off. GOMAXPROCS is set at start from the CPUs and
// the cgroup's limit as always, and raised and lowered by diskprocs.
//go:debug updatemaxprocs=0

// Command annexd runs the annexd daemon, which keeps a content-addressed
// index of the files under its roots; its subcommands run one-off jobs
// against the same machinery (calibration, index checks).
package main

import (
	"io"
	"os"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/internal/cliexit"
)

// Exit codes; the README's table documents them.
const (
	exitOK      = 0
	exitFailure = 1 // runtime failure, or a check found problems
	exitUsage   = 2 // bad flags, arguments or config
	// exitDamaged (4, cmd_repair.go): the index is damaged.
)

// exitError carries the exit status a command wants (see cliexit.Error).
type exitError = cliexit.Error

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return cliexit.Status("annexd", root.Execute(), stderr, exitUsage)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "annexd [flags] [ROOT...]",
		Short:         "Keep a content-addressed index of the files under ROOT",
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("annexd {{.Version}} (" + runtime.Version() + ")\n")
	f := setupRun(root)
	root.AddCommand(
		// subcommands, one per file: cmd_<verb>.go
		newRepairCmd(root, f),
		newCheckDBCmd(),
		newCompactCmd(),
		newCalibrateCmd(),
		newHubCmd(),
	)
	return root
}
