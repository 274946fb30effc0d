package main

import (
	"bytes"
	"testing"

	"github.com/annexd/annexd/api"
)

// The one progress line: each draw goes back to the line's start and
// erases it; a clear erases only a line that is there; finish leaves the
// last line on the screen; a nil bar (no terminal) writes nothing.
func TestProgressBarDraws(t *testing.T) {
	var out bytes.Buffer
	b := &progressBar{w: &out}
	b.clear() // nothing drawn: nothing to erase
	b.draw("one")
	b.draw("two")
	b.clear()
	b.clear()
	b.draw("three")
	b.finish("four")
	b.clear()
	want := "\r\033[Kone\r\033[Ktwo\r\033[K\r\033[Kthree\r\033[Kfour\n"
	if got := out.String(); got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
	var none *progressBar
	none.draw("x")
	none.finish("x")
	none.clear()
	if none.shown() {
		t.Error("a nil bar says a line is shown")
	}
}

// The meter and the three lines keep the text they had when each command
// drew its own bar.
func TestProgressLines(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{meter(0), "[..............................]   0%  "},
		{meter(0.5), "[###############...............]  50%  "},
		{meter(1), "[##############################] 100%  "},
		{dedupBarLine(api.DedupProgress{Done: 1, Total: 4, Freed: 3 << 20}),
			"[#######.......................]  25%  1 of 4 files, freed 3.0 MiB"},
		{dedupBarLine(api.DedupProgress{}), "[..............................]   0%  0 of 0 files, freed 0 B"},
		{auditBarLine(api.AuditRun{ID: 7, Counts: map[string]int64{"ok": 3}, Bytes: 2048},
			api.AuditStatus{Run: &api.AuditRun{ID: 7}, Pass: &api.AuditPass{Files: 4, Done: 3, ETASeconds: 90}, Rate: 1024}),
			"[######################........]  75%  audit run 7: 3 files checked, 2.0 KiB verified, ~1m30s left, 1.0 KiB/s"},
		{auditBarLine(api.AuditRun{ID: 7}, api.AuditStatus{State: "waiting", Reason: "the machine is busy"}),
			"audit run 7: 0 files checked, 0 B verified (waiting: the machine is busy)"},
		{barLine(api.Status{Idle: true, Scan: api.ScanProgress{FilesSeen: 2, FilesHashed: 2, BytesHashed: 10}}),
			"[##############################] 100%  2 files seen, 2 hashed (10 B), 0 pending"},
		{barLine(api.Status{Scan: api.ScanProgress{FilesSeen: 10, BytesSeen: 1000, BytesQueued: 250,
			EstimateSeconds: 60}}),
			"[######################........]  75%  10 files seen, 0 hashed (0 B), 0 pending, ~1m0s left"},
	} {
		if c.got != c.want {
			t.Errorf("got  %q\nwant %q", c.got, c.want)
		}
	}
}
