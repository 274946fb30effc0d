package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
)

// appendGroup prints a group's header (copies, names and physical copies
// when they differ, sizes, the first file's key) and its paths with their
// marks.
func TestAppendGroup(t *testing.T) {
	d := strings.Repeat("ab", 32)
	k, err := key.Parse("SHA256E-s2048--" + d + ".jpg")
	if err != nil {
		t.Fatal(err)
	}
	g := api.DupGroup{Backend: key.SHA256E, Size: 2048, Duplicate: 4096, Reclaimable: 0, Copies: 3, Physical: 1, Unsurveyed: 1,
		Files: []api.Location{
			{Path: []byte("/a/x.jpg"), Key: k},
			{Path: []byte("/a/y.jpg"), Key: k, LinkOf: []byte("/a/x.jpg")},
			{Path: []byte("/a/w.jpg"), Key: k, SharesWith: []byte("/a/x.jpg")},
			{Path: []byte("/b/z.jpg"), Key: k, OutsideRoots: true, SharesWith: []byte("/a/x.jpg")},
		}}
	bytesFmt := func(n int64) string { return fmt.Sprintf("%d B", n) }
	want := "\n3 copies (4 names, 1 physical, 1 not surveyed) × 2048 B, 0 B reclaimable  SHA256E-s2048--" + d + ".jpg\n" +
		"  /a/x.jpg\n  /a/y.jpg  [hard link of /a/x.jpg]\n  /a/w.jpg  [shares blocks with /a/x.jpg]\n" +
		"  /b/z.jpg  [shares blocks with /a/x.jpg]  [outside roots]\n"
	if got := string(appendGroup(nil, g, true, bytesFmt)); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	g.Files, g.Copies, g.Physical, g.Unsurveyed, g.Reclaimable = g.Files[:1:1], 1, 1, 0, 2048
	g.Files[0].Key = key.Key{}
	want = "1 copies × 2.0 KiB, 2.0 KiB reclaimable  SHA256-s2048--" + d + "\n  /a/x.jpg\n"
	g.Digest = make([]byte, 32)
	for i := range g.Digest {
		g.Digest[i] = 0xab
	}
	if got := string(appendGroup(nil, g, false, humanBytes)); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
