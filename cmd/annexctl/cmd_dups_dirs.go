package main

import (
	"bufio"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
)

// dirsLong is what dups --help says of --dirs.
const dirsLong = `

With --dirs, folders are listed instead of files: folders that hold the
same contents (names aside, at any depth), and folders whose every
content another folder holds as well, most reclaimable bytes first. Of
identical folders the first is kept; below the others nothing more is
listed. A folder holding a file with no key yet (pending, unreadable)
is not compared: such folders are listed after the others, and the exit
status is 1. See docs/cli.md.`

// dirsFlagsOK refuses the flags dups --dirs does not take.
func dirsFlagsOK(all, resurvey, across bool) error {
	if all || resurvey || across {
		return &exitError{Code: exitUsage, Err: errors.New("dups: --dirs takes neither --all, --resurvey nor --across-hosts")}
	}
	return nil
}

// runDirDups lists the duplicate folders q selects and sums them up.
func runDirDups(cmd *cobra.Command, q api.DirDupQuery, f dupsFormat) error {
	c, err := dial(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	var p dirPrinter
	list := func(q api.DirDupQuery) error {
		return c.DirDups(cmd.Context(), q, func(d api.DirDup) error {
			_, err := out.Write(p.line(d, f))
			return err
		})
	}
	err = list(q)
	if resolved, ok := resolveDirs(q.Paths); ok && errors.Is(err, api.ErrOutsideRoots) && p.lines == 0 {
		q.Paths = resolved
		err = list(q)
	}
	if errors.Is(err, api.ErrOutsideRoots) && p.lines == 0 {
		return &exitError{Code: exitUsage, Err: fmt.Errorf("dups: %s", statusMessage(err))}
	}
	if err != nil {
		out.Flush()
		return apiFailure(c, err)
	}
	if !f.json && !f.nul {
		out.Write(p.summary(f.size))
	}
	if err := flushOut(out); err != nil {
		return err
	}
	if p.unknown > 0 {
		return &exitError{Code: exitFailure, Err: fmt.Errorf(
			"dups: %s %s no key (pending, unreadable, changing or corrupt: annexctl lookup FILE says which); %s not compared",
			plural(p.unknownFiles, "1 file", groupDigits(p.unknownFiles)+" files"), plural(p.unknownFiles, "has", "have"),
			plural(p.unknown, "its folder and those above it were", "their "+groupDigits(p.unknown)+" folders and those above them were"))}
	}
	return nil
}

// dirPrinter formats the lines of dups --dirs and counts them.
type dirPrinter struct {
	buf                               []byte
	lines, reports, unknown           int64
	reclaimable, unknownFiles, unsurv int64
}

// line formats one DirDup as f asks.
func (p *dirPrinter) line(d api.DirDup, f dupsFormat) []byte {
	p.lines++
	if d.Kind == api.DirUnknown {
		p.unknown++
		p.unknownFiles += d.UnknownFiles
	} else {
		p.reports++
		p.reclaimable += d.Reclaimable
		p.unsurv += int64(d.Unsurveyed)
	}
	switch {
	case f.json:
		p.buf = append(d.AppendJSON(p.buf[:0]), '\n')
	case f.nul:
		p.buf = appendDirNUL(p.buf[:0], d)
	default:
		p.buf = appendDir(p.buf[:0], d, p.lines > 1, f.size)
	}
	return p.buf
}

// appendDir formats one DirDup for people: a header, then the folders,
// indented; a contained folder comes first, the one holding it after.
func appendDir(buf []byte, d api.DirDup, sep bool, size func(int64) string) []byte {
	if sep {
		buf = append(buf, '\n')
	}
	f := d.Folders
	switch d.Kind {
	case api.DirUnknown:
		buf = append(append(append(buf, "not compared: "...), f[0].Path...), "  ("...)
		return append(append(buf, files(d.UnknownFiles)...), " with no key yet)\n"...)
	case api.DirContained:
		buf = appendDirHeader(append(buf, "contained: "...), d, f[1], size)
		buf = append(append(append(buf, "  "...), f[1].Path...), "\n  in "...)
		return append(append(append(buf, f[0].Path...), "  ("...), files(f[0].Files)+", "+size(f[0].Bytes)+")\n"...)
	}
	buf = append(append(append(buf, "identical: "...), strconv.Itoa(len(f))...), " folders, "...)
	buf = appendDirHeader(buf, d, f[0], size)
	for _, fo := range f {
		buf = append(append(append(buf, "  "...), fo.Path...), '\n')
	}
	return buf
}

// appendDirHeader ends a report's first line: what folder f holds and
// what removing the copies gives back.
func appendDirHeader(buf []byte, d api.DirDup, f api.DirFolder, size func(int64) string) []byte {
	buf = append(buf, files(f.Files)+", "+size(f.Bytes)+", "+size(d.Reclaimable)+" reclaimable"...)
	if d.Unsurveyed > 0 {
		buf = append(append(append(buf, " ("...), strconv.Itoa(d.Unsurveyed)...), " not surveyed)"...)
	}
	return append(buf, '\n')
}

// files says "1 file" or "N files".
func files(n int64) string { return plural(n, "1 file", groupDigits(n)+" files") }

// appendDirNUL formats one report for -z: each folder, the kept one
// first, and the report end with NUL; folders of unknown content are
// left out (stderr says so).
func appendDirNUL(buf []byte, d api.DirDup) []byte {
	if d.Kind == api.DirUnknown {
		return buf
	}
	for _, f := range d.Folders {
		buf = append(append(buf, f.Path...), 0)
	}
	return append(buf, 0)
}

// summary is the last line of the plain output.
func (p *dirPrinter) summary(size func(int64) string) []byte {
	s := fmt.Sprintf("\n%s %s, %s reclaimable", groupDigits(p.reports), plural(p.reports, "report", "reports"), size(p.reclaimable))
	if p.unsurv > 0 {
		s += fmt.Sprintf(" (%s not surveyed)", plural(p.unsurv, "1 copy", groupDigits(p.unsurv)+" copies"))
	}
	return []byte(s + "\n")
}
