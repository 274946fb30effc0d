package main

import (
	"strings"
	"testing"

	"github.com/annexd/annexd/api"
)

// The progress line measures a running walk against what it expects to
// find, shows no bar while the tree is still counted, and stays below
// 100 % until the walk ends.
func TestBarLine(t *testing.T) {
	walk := func(done, bytes, expBytes int64, from string) api.Status {
		return api.Status{Scan: api.ScanProgress{FilesSeen: 1000, Walk: &api.WalkProgress{Walking: 1,
			Files: 1000, Bytes: bytes, ExpectFiles: 4000, ExpectBytes: expBytes, ExpectFrom: from, DoneBytes: done}}}
	}
	walked := walk(300, 400, 400, "count")
	walked.Scan.Walk.Walking = 0
	idle := api.Status{Idle: true, Scan: api.ScanProgress{FilesSeen: 4000}}
	for _, c := range []struct {
		name string
		st   api.Status
		want []string
		not  []string
	}{
		{"counting", walk(50, 100, 150, "counting"), []string{"walking: 1,000 files", "counting the tree: 4,000 files"}, []string{"%", "left"}},
		{"counted", walk(100, 200, 400, "count"), []string{" 25%", "walking: 1,000 of ~4,000 files"}, nil},
		{"all settled, walk not done", walk(400, 400, 400, "previous scan"), []string{" 99%"}, []string{"100%"}},
		{"walk done, queue draining", api.Status{Scan: api.ScanProgress{FilesSeen: 10, BytesSeen: 1000, BytesQueued: 250}},
			[]string{" 75%", "10 files seen"}, []string{"walking"}},
		{"walks done, their files settling", walked, []string{" 75%", "walked: 1,000 files"}, []string{"walking"}},
		{"idle: the end", idle, []string{"100%", "4,000 files seen"}, nil},
	} {
		got := barLine(c.st)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", c.name, got, w)
			}
		}
		for _, w := range c.not {
			if strings.Contains(got, w) {
				t.Errorf("%s: %q has %q", c.name, got, w)
			}
		}
	}
}

// A root's line: its scan and watch, or, with its file system away, only
// that (the scan saw the folder beneath the mount point, not the root).
func TestRootState(t *testing.T) {
	away := "file system not mounted, waiting (the folder beneath it is watched)"
	for _, tc := range []struct {
		r    api.RootStatus
		want string
	}{
		{api.RootStatus{ScanDone: true, Watched: true}, "scanned, watched"},
		{api.RootStatus{Watched: true}, "scanning, watched"},
		{api.RootStatus{ScanDone: true, Degraded: true, Reason: "3 directories have no watch"},
			"scanned, DEGRADED (periodic rescans), 3 directories have no watch"},
		{api.RootStatus{ScanDone: true, Watched: true, Away: away}, away + "; its records are kept"},
	} {
		if got := rootState(tc.r); got != tc.want {
			t.Errorf("rootState(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}
