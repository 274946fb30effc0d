package main

import (
	"bufio"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
)

// dupsAcrossHosts answers dups --across-hosts: content held by two hosts
// or more, largest first, as the daemon's hub knows it.
func dupsAcrossHosts(cmd *cobra.Command, minSize int64, limit int, asJSON bool, size func(int64) string) error {
	c, err := dial(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	var n, bytes int64
	buf := make([]byte, 0, 4096)
	_, err = c.HubDups(cmd.Context(), api.HubDupsQuery{MinSize: minSize, Limit: limit}, func(hc api.HubContent) error {
		n++
		bytes += hc.Size
		buf = appendHub(buf[:0], hc, asJSON, n > 1, size)
		_, err := out.Write(buf)
		return err
	})
	if err != nil {
		out.Flush()
		return hubFailure(c, "dups", err)
	}
	if !asJSON {
		fmt.Fprintf(out, "\n%s %s on two hosts or more, %s\n", groupDigits(n), plural(n, "content", "contents"), size(bytes))
	}
	if err := flushOut(out); err != nil {
		return err
	}
	if n == 0 {
		return &exitError{Code: exitFailure, Err: fmt.Errorf("dups: no content of %s or more is held by two hosts the hub knows", size(minSize))}
	}
	return nil
}

// appendHub formats one content as JSON or for people.
func appendHub(buf []byte, hc api.HubContent, asJSON, sep bool, size func(int64) string) []byte {
	if asJSON {
		b, _ := hc.MarshalJSON()
		return append(append(buf, b...), '\n')
	}
	return appendContent(buf, hc, sep, size)
}
