package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
)

func newUICmd() *cobra.Command {
	var noOpen bool
	cmd := &cobra.Command{
		Use:   "ui [--no-open]",
		Short: "Open the daemon's web page: where the space goes, what rotted, which machine holds what",
		Long: `Ask the daemon for its web page and print its address, which carries the
token of this start of the daemon (as Jupyter's does). With a display
($DISPLAY or $WAYLAND_DISPLAY) the address is also opened with xdg-open.

The page listens on 127.0.0.1 on a free port (or [ui] listen; beyond
loopback only over TLS with hub.tls_cert and hub.tls_key). Every request
must carry the token: the page keeps it in a cookie after the first visit.
A restart of the daemon makes a new token: run annexctl ui again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			pg, err := c.UI(cmd.Context())
			if errors.Is(err, api.ErrNotFound) {
				return &exitError{Code: exitFailure, Err: fmt.Errorf("this annexd has no web page (it is older than annexctl); restart it with the new build")}
			}
			if err != nil {
				return apiFailure(c, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), pg.URL)
			if noOpen || (os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "") {
				return nil
			}
			if err := openURL(pg.URL); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "annexctl: cannot open a browser (%v); open the address above\n", err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&noOpen, "no-open", false, "only print the address, even with a display")
	return cmd
}

// openURL starts xdg-open on u without waiting for the browser.
func openURL(u string) error {
	c := exec.Command("xdg-open", u)
	c.Stdin, c.Stdout, c.Stderr = nil, nil, nil
	if err := c.Start(); err != nil {
		return err
	}
	go c.Wait()
	return nil
}
