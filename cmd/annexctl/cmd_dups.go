package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
)

func newDupsCmd() *cobra.Command {
	var (
		asJSON, exact, all, nul bool
		minSize                 string
		limit                   int
	)
	var across bool // cmd_dups_hosts.go
	cmd := &cobra.Command{
		Use:   "dups [--min-size N] [--limit N] [--all] [--bytes] [--json | -z]",
		Short: "List groups of files with identical content, most wasted space first",
		Long: `List groups of distinct files with identical content, ordered by wasted
bytes: size × (copies − 1). Copies are inodes: hard links to one file count
once, and their extra names are listed marked "[hard link of PATH]". Each
group is a header line (copies, size, wasted bytes, key) followed by its
paths, indented; a blank line separates groups. Sizes are human-readable
unless --bytes is given. A summary line ends the list. Empty files are left
out unless --min-size 0 is given.

With -z only the paths are printed, each ending with NUL, and each group
ends with one more NUL (names with newlines stay whole); --json prints
everything, one object per group.

Files outside the daemon's roots (records left from a run with other roots,
which nothing watches or re-checks) are left out, and wasted bytes count
only the files listed: a copy that may be gone is no reason to delete the
one you have. --all lists them too, marked "[outside roots]".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			min, err := parseSize(minSize)
			if err != nil {
				return &exitError{Code: exitUsage, Err: fmt.Errorf("dups: --min-size: %w", err)}
			}
			if limit < 0 {
				return &exitError{Code: exitUsage, Err: fmt.Errorf("dups: --limit must not be negative")}
			}
			if nul && asJSON {
				return &exitError{Code: exitUsage, Err: fmt.Errorf("dups: give --json or -z, not both")}
			}
			if across {
				if nul || all {
					return &exitError{Code: exitUsage, Err: fmt.Errorf("dups: --across-hosts takes neither -z nor --all")}
				}
				return dupsAcrossHosts(cmd, min, limit, asJSON, sizeFormat(exact)) // cmd_dups_hosts.go
			}
			c, err := dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
			size := humanBytes
			if exact {
				size = func(n int64) string { return fmt.Sprintf("%d B", n) }
			}
			var groups, wasted int64
			buf := make([]byte, 0, 4096)
			_, err = c.Dups(cmd.Context(), api.DupQuery{MinSize: min, Limit: limit, Outside: all}, func(g api.DupGroup) error {
				groups++
				wasted += g.Wasted
				switch {
				case asJSON:
					buf = append(g.AppendJSON(buf[:0]), '\n')
				case nul:
					buf = appendGroupNUL(buf[:0], g)
				default:
					buf = appendGroup(buf[:0], g, groups > 1, size)
				}
				_, err := out.Write(buf)
				return err
			})
			if err != nil {
				out.Flush()
				return apiFailure(c, err)
			}
			if !asJSON && !nul {
				fmt.Fprintf(out, "\n%s %s, %s wasted\n", groupDigits(groups), plural(groups, "group", "groups"), size(wasted))
			}
			if err := flushOut(out); err != nil {
				return err
			}
			if !asJSON && !nul && !all {
				hiddenNote(cmd, c)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&minSize, "min-size", "1", "only files of at least this size (bytes, or with K, M, G, T: 100k, 1.5G); 0 lists empty files too")
	f.IntVar(&limit, "limit", 0, "at most this many groups (0: all)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per group (see docs/cli.md)")
	f.BoolVarP(&nul, "nul", "z", false, "print only the paths, each ending with NUL, and one more NUL after each group")
	f.BoolVar(&exact, "bytes", false, "print sizes in bytes")
	f.BoolVar(&all, "all", false, "also list files outside the daemon's roots (marked; not checked since an earlier run)")
	f.BoolVar(&across, "across-hosts", false, "list content held by two hosts or more, as the hub knows them (see docs/cli.md)")
	return cmd
}

// appendGroup formats one group for people.
func appendGroup(buf []byte, g api.DupGroup, sep bool, size func(int64) string) []byte {
	if sep {
		buf = append(buf, '\n')
	}
	buf = append(strconv.AppendInt(buf, int64(g.Copies), 10), " copies"...)
	if len(g.Files) != g.Copies {
		buf = append(strconv.AppendInt(append(buf, " ("...), int64(len(g.Files)), 10), " names)"...)
	}
	buf = append(append(append(buf, " × "...), size(g.Size)...), ", "...)
	buf = append(append(append(append(buf, size(g.Wasted)...), " wasted  "...), groupKey(g)...), '\n')
	for _, f := range g.Files {
		buf = append(buf, "  "...)
		buf = append(buf, f.Path...)
		if f.LinkOf != nil {
			buf = append(buf, "  [hard link of "...)
			buf = append(append(buf, f.LinkOf...), ']')
		}
		if f.OutsideRoots {
			buf = append(buf, "  [outside roots]"...)
		}
		buf = append(buf, '\n')
	}
	return buf
}

// appendGroupNUL formats one group for -z: each path and the group end
// with NUL.
func appendGroupNUL(buf []byte, g api.DupGroup) []byte {
	for _, f := range g.Files {
		buf = append(append(buf, f.Path...), 0)
	}
	return append(buf, 0)
}

// hiddenNote tells on stderr that files outside the roots were left out,
// when the daemon holds any.
func hiddenNote(cmd *cobra.Command, c *api.Client) {
	st, err := c.Status(cmd.Context())
	if err != nil || len(st.OutsideRoots) == 0 {
		return
	}
	var n int64
	for _, o := range st.OutsideRoots {
		n += max(o.Files, 0)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "annexctl: dups: files outside the roots are left out (the index holds %s: annexctl status says where; --all lists them)\n",
		groupDigits(n)+" "+plural(n, "such record", "such records"))
}

// groupKey names the group's content: the first file's key, or the bare
// digest when the daemon sent none.
func groupKey(g api.DupGroup) string {
	if len(g.Files) > 0 && !g.Files[0].Key.IsZero() {
		return g.Files[0].Key.String()
	}
	b := g.Backend
	if !b.Valid() {
		b = key.Default
	}
	return fmt.Sprintf("%s-s%d--%s", b.Base(), g.Size, hex.EncodeToString(g.Digest))
}
