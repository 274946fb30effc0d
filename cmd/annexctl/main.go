// Command annexctl is the command-line client of annexd: it asks the daemon
// about keys, duplicates and status, and computes git-annex keys on its own.
package main

import (
	"io"
	"os"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/internal/cliexit"
	ver "github.com/annexd/annexd/internal/version"
)

// Exit codes; the README's table documents them.
const (
	exitOK       = 0
	exitFailure  = 1 // some input failed (unreadable file, unknown key, …)
	exitUsage    = 2 // bad flags or arguments
	exitNoDaemon = 3 // the daemon is not running or not reachable
	// audit run --wait (cmd_audit.go)
	exitCorrupt    = 4   // a file was found corrupt
	exitUnreadable = 5   // a file was unreadable or had a lost write, none corrupt
	exitUntraced   = 6   // a file changed without a trace, none of the above
	exitTimeLimit  = 101 // the time limit stopped the run, nothing found (git-annex's)
)

// exitError carries the exit status a command wants (see cliexit.Error).
type exitError = cliexit.Error

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return cliexit.Status("annexctl", root.Execute(), stderr, exitUsage)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "annexctl",
		Short:         "Query annexd and compute git-annex keys",
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("annexctl {{.Version}} (" + runtime.Version() + ")\n")
	root.PersistentFlags().String("socket", "",
		"the daemon's socket (default: $ANNEXD_SOCKET, else annexd's default socket path)")
	root.AddCommand(
		// subcommands, one per file: cmd_<verb>.go
		newLookupCmd(),
		newWhereisCmd(),
		newDupsCmd(),
		newCopiesCmd(),
		newHostsCmd(),
		newStatusCmd(),
		newForgetCmd(),
		newDedupCmd(),
		newAuditCmd(),
		newHaveCmd(),
		newCalckeyCmd(),
		newChangesCmd(),
		newUICmd(),
	)
	return root
}

// version is the build's version (internal/version): stamped at build
// time, the module's, or the source's revision.
func version() string { return ver.String() }
