package deduppart

import (
	"errors"
	"strings"
	"testing"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/dedup"
)

// Background deduplication pauses on the audit's gates, as [dedup] says.
func TestDedupGates(t *testing.T) {
	if gs := dedupGates(bulkFlag(false), 0, 1, false); len(gs) != 3 {
		t.Errorf("%d gates with max_load 1 and the battery heeded: %v", len(gs), gs)
	}
	gs := dedupGates(bulkFlag(true), 0, -1, true)
	if len(gs) != 1 {
		t.Fatalf("%d gates with max_load -1 and the battery ignored: %v", len(gs), gs)
	}
	if why, busy := gs[0].Busy(); !busy || why != "the indexer is busy with a scan or many changes" {
		t.Errorf("the indexer works: %q, %v", why, busy)
	}
}

type bulkFlag bool

func (f bulkFlag) Bulk() bool { return bool(f) }

// Groups on a file system that cannot share extents leave the plan and
// are counted against it; the rest stays.
func TestLeaveUnsupported(t *testing.T) {
	act := func(n int64) dedup.Action { return dedup.Action{Targets: []dedup.File{{Path: []byte("/t")}}, Frees: n} }
	var plan dedup.Plan
	plan.Add(dedup.Group{Dev: 1, Actions: []dedup.Action{act(10), act(10)}, Frees: 20},
		dedup.Group{Dev: 2, Actions: []dedup.Action{act(5)}, Frees: 5},
		dedup.Group{Dev: 1, Actions: []dedup.Action{act(1)}, Frees: 1})
	plan.Shared = 3
	plan.Unsupported = []*dedup.UnsupportedError{{FS: "ext4", Dev: 1, Path: []byte("/e/x"), Err: errors.New("EOPNOTSUPP")}}
	out, lost := leaveUnsupported(plan)
	if len(out.Groups) != 1 || out.Actions != 1 || out.Frees != 5 || out.Shared != 3 {
		t.Errorf("plan left %+v", out)
	}
	if len(lost) != 1 || lost[0].groups != 2 || lost[0].actions != 3 || lost[0].frees != 21 {
		t.Errorf("lost %+v", lost)
	}
	err := unsupportedError(lost)
	if !errors.Is(err, api.ErrUnsupported) || !errors.Is(err, dedup.ErrUnsupported) || !strings.Contains(err.Error(), "ext4") {
		t.Errorf("err %v", err)
	}
	if unsupportedError(nil) != nil {
		t.Error("an error without unsupported file systems")
	}
}

// The plan's groups go out freeing the most first, as many as asked.
func TestSendPlanOrder(t *testing.T) {
	g := func(keeper string, frees int64) dedup.Group {
		return dedup.Group{Keeper: dedup.File{Path: []byte(keeper)}, Frees: frees,
			Actions: []dedup.Action{{Targets: []dedup.File{{Path: []byte(keeper + ".copy")}}, Frees: frees}}}
	}
	var plan dedup.Plan
	plan.Add(g("/b", 5), g("/a", 9), g("/c", 5), g("/d", 1))
	for n, want := range map[int]string{0: "", 2: "/a /b", -1: "/a /b /c /d", 9: "/a /b /c /d"} {
		var got []string
		err := sendPlan(plan, nil, api.DedupRequest{Groups: n}, func(ev api.DedupEvent) error {
			if ev.Group != nil {
				got = append(got, string(ev.Group.Keeper))
				if len(ev.Group.Targets) != 1 || string(ev.Group.Targets[0]) != string(ev.Group.Keeper)+".copy" {
					t.Errorf("targets %q", ev.Group.Targets)
				}
			} else if ev.Plan == nil || ev.Plan.Groups != 4 || ev.Plan.Frees != 20 {
				t.Errorf("plan event %+v", ev)
			}
			return nil
		})
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("groups=%d: %q, %v; want %q", n, got, err, want)
		}
	}
}
