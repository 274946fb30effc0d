package main

import (
	"bufio"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/spf13/cobra"
)

func newAuditHistoryCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "history [--json]",
		Short: "List the audit's completed passes: what each checked and found, and the coverage",
		Long: `List the passes the audit completed, oldest first (the daemon keeps the
last 100): when each ended and how long it took, the files and bytes it
verified, the problems it found, and the coverage of the schedule when it
ended: the share of the files verified within [audit] every.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			h, err := c.AuditHistory(cmd.Context())
			if err != nil {
				return apiFailure(c, err)
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			if asJSON {
				err = writeJSON(out, api.AuditHistory{Passes: h})
			} else {
				err = printAuditHistory(out, h)
			}
			if err != nil {
				return err
			}
			return flushOut(out)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"passes": [...]} (see docs/cli.md)`)
	return cmd
}

// printAuditHistory writes the passes as a table for people.
func printAuditHistory(w io.Writer, h []api.AuditPassSummary) error {
	if len(h) == 0 {
		_, err := fmt.Fprintln(w, "no audit pass completed yet (annexctl audit status says how far the one in progress is)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pass\tended\ttook\tverified ok\t\tproblems\tleft\tnot read\tcoverage\t")
	for _, p := range h {
		cover := "?"
		if cv := p.Coverage; cv != nil && cv.Total > 0 {
			cover = fmt.Sprintf("%.0f %%", 100*float64(cv.Files)/float64(cv.Total))
		} else if cv != nil {
			cover = "no files"
		}
		okBytes := "?"
		if p.BytesOK > 0 || p.Counts["ok"] == 0 {
			okBytes = humanBytes(p.BytesOK)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s files\t%s\t%s\t%s\t%s\t%s\t\n", p.ID, p.Ended.Local().Format("2006-01-02 15:04"),
			p.Ended.Sub(p.Began).Round(time.Second), groupDigits(p.Counts["ok"]), okBytes, groupDigits(p.Problems),
			groupDigits(p.Left.Files), groupDigits(p.Unread), cover)
	}
	return tw.Flush()
}
