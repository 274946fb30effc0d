package main

import (
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
)

// The history's table has a row a pass with its coverage and the files it
// did not read, and "?" for what a pass completed before the history was
// kept did not keep.
func TestPrintAuditHistory(t *testing.T) {
	began := time.Date(2026, 2, 1, 1, 0, 0, 0, time.Local)
	h := []api.AuditPassSummary{
		{ID: 1, Began: began.AddDate(0, -1, 0), Ended: began.AddDate(0, -1, 0).Add(time.Hour), Counts: map[string]int64{"ok": 59800}},
		{ID: 2, Began: began, Ended: began.Add(2 * time.Hour), Counts: map[string]int64{"ok": 59999, "corrupt": 1}, BytesOK: 12 << 30,
			Problems: 1, Coverage: &api.AuditCoverage{Files: 59000, Total: 60000}, Left: api.AuditLeft{Files: 4, Bytes: 600006, Away: 4}, Unread: 11},
	}
	var b strings.Builder
	if err := printAuditHistory(&b, h); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	if len(lines) != 3 || !strings.HasSuffix(lines[1], "?") || !strings.Contains(lines[1], "59,800 files") ||
		!strings.HasSuffix(lines[2], "98 %") || !strings.Contains(lines[2], "12.0 GiB") || !strings.Contains(lines[2], "2026-02-01 03:00") ||
		!strings.Contains(lines[2], " 1     4        11      98 %") {
		t.Errorf("history:\n%s", b.String())
	}
}
