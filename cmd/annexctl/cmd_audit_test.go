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
