package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
)

// whereisHosts answers whereis --hosts: which machines hold each
// argument's content, as the daemon's hub knows it.
func whereisHosts(cmd *cobra.Command, args []string, o whereisOpts) error {
	if o.batch || o.nul {
		return &exitError{Code: exitUsage, Err: errors.New("whereis: --hosts takes its arguments on the command line, and neither --batch nor -z")}
	}
	asJSON, wait := o.json, o.wait
	c, err := dial(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	cwd, err := os.Getwd()
	if err != nil {
		return &exitError{Code: exitFailure, Err: fmt.Errorf("whereis: current directory: %w", err)}
	}
	out := bufio.NewWriter(cmd.OutOrStdout())
	var failed error
	for i, arg := range args {
		hc, err := hubWhereis(cmd, c, arg, cwd, wait)
		if err == nil && len(hc.Holders) == 0 {
			err = &exitError{Code: exitFailure, Err: fmt.Errorf("whereis: %s: no host the hub knows holds this content%s", arg, lagNote(cmd, c))}
		} else if err != nil {
			err = hubFailure(c, "whereis: "+arg, err)
		}
		if err != nil {
			var ee *exitError
			if !errors.As(err, &ee) || ee.Code != exitFailure {
				out.Flush()
				return err // no daemon: the other arguments would fail alike
			}
			out.Flush()
			fmt.Fprintf(cmd.ErrOrStderr(), "annexctl: %v\n", err)
			failed = &exitError{Code: exitFailure} // told above
			continue
		}
		if asJSON {
			b, _ := hc.MarshalJSON()
			out.Write(append(b, '\n'))
			continue
		}
		if len(args) > 1 {
			if i > 0 {
				out.WriteByte('\n')
			}
			fmt.Fprintf(out, "%s:\n", arg)
		}
		out.Write(appendHolders(nil, hc.Holders, "", time.Now()))
	}
	if err := flushOut(out); err != nil {
		return err
	}
	return failed
}

func hubWhereis(cmd *cobra.Command, c *api.Client, arg, cwd string, wait bool) (api.HubContent, error) {
	ctx := cmd.Context()
	if k, err := key.Parse(arg); err == nil && !exists(arg) {
		return c.HubWhereisKey(ctx, k)
	}
	p := absPath([]byte(arg), cwd)
	hc, err := c.HubWhereisPath(ctx, p, wait)
	if errors.Is(err, api.ErrOutsideRoots) {
		if q := resolveDir(p); q != nil {
			return c.HubWhereisPath(ctx, q, wait)
		}
	}
	return hc, err
}

// lagNote says when this host has changes the hub has not applied yet:
// a file just added here may not be known there.
func lagNote(cmd *cobra.Command, c *api.Client) string {
	st, err := c.Status(cmd.Context())
	if err != nil || st.Hub == nil || st.Hub.Lag == 0 {
		return ""
	}
	return fmt.Sprintf(" (the hub has yet to apply %s of this host's changes)", groupDigits(int64(st.Hub.Lag)))
}
