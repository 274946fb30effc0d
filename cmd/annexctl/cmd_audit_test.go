package main

import (
	"errors"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/cliexit"
)

// The exit status of audit run --wait: corruption wins over unreadable
// files and lost writes, which win over changes without a trace, any
// finding over how the run stopped, and a run stopped by its time limit
// with nothing found is git-annex's 101.
func TestAuditRunExit(t *testing.T) {
	cases := []struct {
		stopped string
		counts  map[string]int64
		want    int
	}{
		{api.AuditDone, map[string]int64{"ok": 3, "modified": 1, "missing": 1}, 0},
		{api.AuditDone, map[string]int64{"corrupt": 1, "unreadable": 1}, 4},
		{api.AuditTimeLimit, map[string]int64{"corrupt": 1}, 4},
		{api.AuditDone, map[string]int64{"unreadable": 1}, 5},
		{api.AuditDone, map[string]int64{"lost_write": 1}, 5},
		{api.AuditTimeLimit, map[string]int64{"ok": 9}, 101},
		{api.AuditTimeLimit, map[string]int64{"lost_write": 1}, 5},
		{api.AuditDone, map[string]int64{"ok": 2, "untraced": 1}, 6},
		{api.AuditTimeLimit, map[string]int64{"untraced": 1}, 6},
		{api.AuditDone, map[string]int64{"untraced": 1, "unreadable": 1}, 5},
		{api.AuditDone, map[string]int64{"untraced": 1, "corrupt": 1}, 4},
		{api.AuditPaused, map[string]int64{"ok": 1}, 1},
		{api.AuditShutdown, nil, 1},
		{api.AuditError, nil, 1},
	}
	for _, c := range cases {
		r := api.AuditRun{ID: 1, Began: time.Unix(1, 0), Ended: time.Unix(2, 0), StoppedBy: c.stopped, Counts: c.counts}
		err := runExit(r)
		if got := cliexit.Status("annexctl", err, discard{}, 99); got != c.want {
			t.Errorf("%s %v: exit %d, want %d", c.stopped, c.counts, got, c.want)
		}
		var e *exitError
		if err != nil && (!errors.As(err, &e) || e.Err != nil) {
			t.Errorf("%s %v: %v carries a message; the summary says it all", c.stopped, c.counts, err)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// The coverage line names the interval as people say it, and says how
// old the count is once it is a few seconds old.
func TestCoverageLine(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		cv   api.AuditCoverage
		want string
	}{
		{api.AuditCoverage{EverySeconds: 3600, Files: 12, Total: 12, At: now}, "12 of 12 files verified in the last hour (100 %)"},
		{api.AuditCoverage{EverySeconds: 30 * 86400, Files: 41000, Total: 60000, At: now.Add(-time.Second)},
			"41,000 of 60,000 files verified in the last 30 days (68 %)"},
		{api.AuditCoverage{EverySeconds: 86400, Files: 1, Total: 2, At: now.Add(-8 * time.Second)},
			"1 of 2 files verified in the last day (50 %) (counted 8s ago)"},
		{api.AuditCoverage{EverySeconds: 5400, At: now}, "no files to verify; every file is verified every 1h30m0s"},
		{api.AuditCoverage{EverySeconds: 12 * 3600}, "no files to verify (not counted yet); every file is verified every 12 hours"},
	} {
		if got := coverageLineAt(c.cv, now); got != c.want {
			t.Errorf("coverageLineAt(%+v) = %q, want %q", c.cv, got, c.want)
		}
	}
}
