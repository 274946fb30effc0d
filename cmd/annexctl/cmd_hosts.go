package main

import (
	"bufio"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newHostsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "hosts [--json]",
		Short: "List the hosts the daemon's hub knows: records, last heard from, stale",
		Long: `List every host the daemon's hub has heard from: how many paths and bytes
it holds for it, how far it has applied its changes, when it last heard
from it, and whether it is stale (silent for longer than the hub's
stale_after: its copies are then not counted by copies).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			hosts, err := c.HubHosts(cmd.Context())
			if err != nil {
				return hubFailure(c, "hosts", err)
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			now := time.Now()
			for _, h := range hosts {
				if asJSON {
					if err := writeJSON(out, h); err != nil {
						return err
					}
					continue
				}
				state := "complete"
				switch {
				case h.Resending:
					state = "receiving its whole index"
				case !h.Complete:
					state = "incomplete"
				}
				fmt.Fprintf(out, "%s  %s files, %s, through change %s (%s), last seen %s", h.Name, groupDigits(h.Records),
					humanBytes(h.Bytes), groupDigits(int64(h.Seq)), state, ago(h.LastSeen, now))
				if h.Stale {
					fmt.Fprint(out, "  STALE")
				}
				fmt.Fprintln(out)
			}
			return flushOut(out)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per host (see docs/cli.md)")
	return cmd
}
