package main

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
)

func newDupsCmd() *cobra.Command {
	var (
		asJSON, exact, all, nul, resurvey bool
		minSize                           string
		limit                             int
	)
	var across bool // cmd_dups_hosts.go
	var dirs bool   // cmd_dups_dirs.go
	cmd := &cobra.Command{
		Use:   "dups [--dirs] [--min-size N] [--limit N] [--all] [--resurvey] [--bytes] [--json | -z] [PATH...]",
		Short: "List groups of files with identical content and what sharing their blocks would give back",
		Long: `List groups of distinct files with identical content, most duplicate bytes
first: size × (copies − 1). Copies are inodes: hard links to one file count
once, and their extra names are listed marked "[hard link of PATH]".
Copies that share their blocks already (reflinks, or files deduplicated
before) are one physical copy: they are marked "[shares blocks with
PATH]". Each group is a header line (copies, physical copies when fewer,
size, reclaimable bytes, key) followed by its paths, indented; a blank
line separates groups. Reclaimable bytes are what "annexctl dedup" would
give back: the blocks each copy holds alone, holes not counted, on each
file system less one copy. A summary line ends the list. Sizes are
human-readable unless --bytes is given. Empty files are left out unless
--min-size 0 is given.

With PATHs, only the groups with a file at or below one of them are
listed, each with all its files. The daemon looks at the files' extent
maps once and keeps what it found until a file of the group changes or a
dedup run acts on it; --resurvey looks again (after another tool shared
blocks, say).

With -z only the paths are printed, each ending with NUL, and each group
ends with one more NUL (names with newlines stay whole); --json prints
everything, one object per group.

Files outside the daemon's roots (records left from a run with other roots,
which nothing watches or re-checks) are left out, and the figures count
only the files listed: a copy that may be gone is no reason to delete the
one you have. --all lists them too, marked "[outside roots]".` + dirsLong,
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
			if dirs {
				if err := dirsFlagsOK(all, resurvey, across); err != nil {
					return err
				}
			}
			if across {
				if nul || all || resurvey || len(args) > 0 {
					return &exitError{Code: exitUsage, Err: fmt.Errorf("dups: --across-hosts takes neither -z, --all, --resurvey nor PATHs")}
				}
				return dupsAcrossHosts(cmd, min, limit, asJSON, sizeFormat(exact)) // cmd_dups_hosts.go
			}
			paths, err := argPaths("dups", args)
			if err != nil {
				return err
			}
			if dirs {
				q := api.DirDupQuery{MinSize: min, Limit: limit, Paths: paths}
				return runDirDups(cmd, q, dupsFormat{json: asJSON, nul: nul, size: sizeFormat(exact)})
			}
			q := api.DupQuery{MinSize: min, Limit: limit, Outside: all, Paths: paths, Resurvey: resurvey}
			return runDups(cmd, q, dupsFormat{json: asJSON, nul: nul, size: sizeFormat(exact)})
		},
	}
	f := cmd.Flags()
	f.StringVar(&minSize, "min-size", "1", "only files of at least this size (bytes, or with K, M, G, T: 100k, 1.5G); 0 lists empty files too")
	f.IntVar(&limit, "limit", 0, "at most this many groups (0: all)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per group (see docs/cli.md)")
	f.BoolVarP(&nul, "nul", "z", false, "print only the paths, each ending with NUL, and one more NUL after each group")
	f.BoolVar(&exact, "bytes", false, "print sizes in bytes")
	f.BoolVar(&all, "all", false, "also list files outside the daemon's roots (marked; not checked since an earlier run)")
	f.BoolVar(&resurvey, "resurvey", false, "look at which files share blocks again instead of using what the daemon found before")
	f.BoolVar(&dirs, "dirs", false, "list folders that hold the same contents, or whose contents another folder holds")
	f.BoolVar(&across, "across-hosts", false, "list content held by two hosts or more, as the hub knows them (see docs/cli.md)")
	return cmd
}

// dupsFormat is how dups prints.
type dupsFormat struct {
	json, nul bool
	size      func(int64) string
}

// surveyNoteAge is how old a survey must be for dups to say its age.
const surveyNoteAge = time.Hour

// runDups lists the groups q selects and sums them up.
func runDups(cmd *cobra.Command, q api.DupQuery, f dupsFormat) error {
	c, err := dial(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	var (
		groups, dup, rec int64
		oldest           time.Time
	)
	buf := make([]byte, 0, 4096)
	list := func(q api.DupQuery) error {
		_, err := c.Dups(cmd.Context(), q, func(g api.DupGroup) error {
			groups++
			dup += g.Duplicate
			rec += g.Reclaimable
			if oldest.IsZero() || g.SurveyedAt.Before(oldest) {
				oldest = g.SurveyedAt
			}
			switch {
			case f.json:
				buf = append(g.AppendJSON(buf[:0]), '\n')
			case f.nul:
				buf = appendGroupNUL(buf[:0], g)
			default:
				buf = appendGroup(buf[:0], g, groups > 1, f.size)
			}
			_, err := out.Write(buf)
			return err
		})
		return err
	}
	err = list(q)
	if resolved, ok := resolveDirs(q.Paths); ok && errors.Is(err, api.ErrOutsideRoots) && groups == 0 {
		q.Paths = resolved
		err = list(q)
	}
	if errors.Is(err, api.ErrOutsideRoots) && groups == 0 {
		return &exitError{Code: exitUsage, Err: fmt.Errorf("dups: %s", statusMessage(err))}
	}
	if err != nil {
		out.Flush()
		return apiFailure(c, err)
	}
	if !f.json && !f.nul {
		fmt.Fprintf(out, "\n%s %s, %s reclaimable of %s in extra copies\n", groupDigits(groups), plural(groups, "group", "groups"),
			f.size(rec), f.size(dup))
	}
	if err := flushOut(out); err != nil {
		return err
	}
	if f.json || f.nul {
		return nil
	}
	if age := time.Since(oldest); groups > 0 && age > surveyNoteAge {
		fmt.Fprintf(cmd.ErrOrStderr(), "annexctl: dups: which files share blocks was looked at up to %s ago; --resurvey looks again\n",
			age.Round(time.Minute))
	}
	if !q.Outside {
		hiddenNote(cmd, c)
	}
	return nil
}

// appendGroup formats one group for people.
func appendGroup(buf []byte, g api.DupGroup, sep bool, size func(int64) string) []byte {
	if sep {
		buf = append(buf, '\n')
	}
	buf = append(strconv.AppendInt(buf, int64(g.Copies), 10), " copies"...)
	var notes []string
	if len(g.Files) != g.Copies {
		notes = append(notes, strconv.Itoa(len(g.Files))+" names")
	}
	if g.Physical < g.Copies {
		notes = append(notes, strconv.Itoa(g.Physical)+" physical")
	}
	if g.Unsurveyed > 0 {
		notes = append(notes, strconv.Itoa(g.Unsurveyed)+" not surveyed")
	}
	if len(notes) > 0 {
		buf = append(append(append(buf, " ("...), strings.Join(notes, ", ")...), ')')
	}
	buf = append(append(append(buf, " × "...), size(g.Size)...), ", "...)
	buf = append(append(append(append(buf, size(g.Reclaimable)...), " reclaimable  "...), groupKey(g)...), '\n')
	for _, f := range g.Files {
		buf = append(buf, "  "...)
		buf = append(buf, f.Path...)
		if f.LinkOf != nil {
			buf = append(buf, "  [hard link of "...)
			buf = append(append(buf, f.LinkOf...), ']')
		}
		if f.SharesWith != nil {
			buf = append(buf, "  [shares blocks with "...)
			buf = append(append(buf, f.SharesWith...), ']')
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
