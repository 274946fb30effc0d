// Command annexd runs the annexd daemon, which keeps a content-addressed
// index of the files under its roots; its subcommands run one-off jobs
// against the same machinery (calibration, index checks).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// Exit codes; the README's table documents them.
const (
	exitOK      = 0
	exitFailure = 1 // runtime failure, or a check found problems
	exitUsage   = 2 // bad flags, arguments or config
)

// exitError carries the exit status a command wants.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "annexd:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "annexd:", err)
	return exitUsage
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "annexd [flags] [ROOT...]",
		Short:         "Keep a content-addressed index of the files under ROOT",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	setupRun(root)
	root.AddCommand(
		// subcommands, one per file: cmd_<verb>.go
		newCheckDBCmd(),
		newCompactCmd(),
		newCalibrateCmd(),
	)
	return root
}
