package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
)

// socketEnv names the environment variable that overrides the default
// socket path; --socket overrides both.
const socketEnv = "ANNEXD_SOCKET"

// socketPath resolves the daemon's socket: --socket, then $ANNEXD_SOCKET,
// then the daemon's own default (api.DefaultSocketPath).
func socketPath(cmd *cobra.Command) (string, error) {
	if f := cmd.Flag("socket"); f != nil && f.Value.String() != "" {
		return filepath.Abs(f.Value.String())
	}
	if s := os.Getenv(socketEnv); s != "" {
		return filepath.Abs(s)
	}
	return api.DefaultSocketPath()
}

// dial returns a client for the daemon this command should talk to.
func dial(cmd *cobra.Command) (*api.Client, error) {
	sock, err := socketPath(cmd)
	if err != nil {
		return nil, &exitError{Code: exitUsage, Err: err}
	}
	return api.Dial(sock), nil
}

// apiFailure turns an error from the api client into the exitError the
// user sees: "not running" and "not allowed" are exit 3 with one line that
// says where we looked and what to do.
func apiFailure(c *api.Client, err error) error {
	var nd *api.NoDaemonError
	var busy *api.BusyError
	switch {
	case errors.Is(err, api.ErrClosed):
		return &exitError{Code: exitNoDaemon, Err: fmt.Errorf(
			"%s: it stopped, was killed or restarted (see its log); run the command again once it is back",
			strings.TrimPrefix(err.Error(), "api: "))}
	case errors.As(err, &busy):
		return &exitError{Code: exitNoDaemon, Err: fmt.Errorf(
			"annexd on %s is running but busy: it took no connection in %v of retrying (%v); try again later, or with a longer --timeout",
			busy.Socket, busy.Waited.Round(100*time.Millisecond), busy.Err)}
	case errors.Is(err, api.ErrStarting):
		return &exitError{Code: exitNoDaemon, Err: fmt.Errorf(
			"annexd at %s is still starting (%s); try again in a moment, or wait with `annexctl status --wait`",
			c.Socket(), statusMessage(err))}
	case errors.As(err, &nd) && errors.Is(nd.Err, syscall.EACCES):
		return &exitError{Code: exitNoDaemon, Err: fmt.Errorf(
			"cannot connect to annexd at %s: permission denied (the daemon runs as another user?)", nd.Socket)}
	case errors.As(err, &nd):
		return &exitError{Code: exitNoDaemon, Err: fmt.Errorf(
			"annexd is not running: nothing answers on %s (%v); start it with `annexd DIR`, or point --socket or %s at its socket",
			nd.Socket, nd.Err, socketEnv)}
	case errors.Is(err, api.ErrForbidden):
		return &exitError{Code: exitNoDaemon, Err: fmt.Errorf(
			"annexd at %s refused this user: it serves only its own user and root", c.Socket())}
	}
	return &exitError{Code: exitFailure, Err: err}
}
