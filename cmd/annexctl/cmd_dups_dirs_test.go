package main

import (
	"strings"
	"testing"

	"github.com/annexd/annexd/api"
)

// TestDirLines: the plain lines of each kind of dups --dirs report and
// the summary, byte for byte; -z prints the folders of a report, the kept
// one first, and leaves folders not compared out.
func TestDirLines(t *testing.T) {
	same := api.DirDup{Kind: api.DirIdentical, Reclaimable: 8192, Unsurveyed: 2, Folders: []api.DirFolder{
		{Path: []byte("/a"), Files: 3, Bytes: 8001}, {Path: []byte("/b"), Files: 3, Bytes: 8001}}}
	in := api.DirDup{Kind: api.DirContained, Reclaimable: 4096, Folders: []api.DirFolder{
		{Path: []byte("/big"), Files: 2, Bytes: 8000}, {Path: []byte("/part"), Files: 1, Bytes: 5000}}}
	unk := api.DirDup{Kind: api.DirUnknown, UnknownFiles: 2, Folders: []api.DirFolder{{Path: []byte("/p")}}}
	var p dirPrinter
	f := dupsFormat{size: sizeFormat(true)}
	var out strings.Builder
	for _, d := range []api.DirDup{same, in, unk} {
		out.Write(p.line(d, f))
	}
	out.Write(p.summary(f.size))
	want := `identical: 2 folders, 3 files, 8001 B, 8192 B reclaimable (2 not surveyed)
  /a
  /b

contained: 1 file, 5000 B, 4096 B reclaimable
  /part
  in /big  (2 files, 8000 B)

not compared: /p  (2 files with no key yet)

2 reports, 12288 B reclaimable (2 copies not surveyed)
`
	if out.String() != want {
		t.Errorf("plain:\n%s\nwant:\n%s", out.String(), want)
	}
	if p.unknown != 1 || p.unknownFiles != 2 {
		t.Errorf("counted %d folders, %d files not compared; want 1, 2", p.unknown, p.unknownFiles)
	}
	var z strings.Builder
	for _, d := range []api.DirDup{same, in, unk} {
		z.Write(p.line(d, dupsFormat{nul: true}))
	}
	if want := "/a\x00/b\x00\x00/big\x00/part\x00\x00"; z.String() != want {
		t.Errorf("-z: %q, want %q", z.String(), want)
	}
}
