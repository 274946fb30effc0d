package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/dedup"
	"github.com/annexd/annexd/store"
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

// A hardlink step a crash cut short is settled when the daemon starts,
// before it serves: the temporary link is gone, the name holds its own
// file, and the intent is dropped.
func TestRunRecoversDedup(t *testing.T) {
	root := t.TempDir()
	keeper, target := filepath.Join(root, "k"), filepath.Join(root, "t")
	writeOld(t, keeper, "same bytes")
	writeOld(t, target, "same bytes")
	temp := ".annexd-dedup-test1"
	if err := os.Link(keeper, filepath.Join(root, temp)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, root)
	kst, tst := statOf(t, keeper), statOf(t, target)
	in := dedup.Intent{ID: "test1", Dir: []byte(root), Name: []byte("t"), Temp: temp, Dev: kst.Dev, Keeper: kst.Ino, Target: tst.Ino}
	withStore(t, cfg.Index, func(st *store.Store) {
		if err := dedup.NewMetaIntents(st).PutIntent(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	})

	_, end := runApp(t, cfg, nil)
	ctx := context.Background()
	c := api.Dial(cfg.Socket)
	defer c.Close()
	var st api.Status
	var err error
	for deadline := time.Now().Add(30 * time.Second); !st.Idle; time.Sleep(20 * time.Millisecond) {
		st, err = c.Status(ctx)
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %+v, %v", st, err)
		}
	}
	if err := end(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, temp)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary link is still there: %v", err)
	}
	if got := statOf(t, target); got.Ino != tst.Ino {
		t.Errorf("%s is inode %d, want its own %d", target, got.Ino, tst.Ino)
	}
	withStore(t, cfg.Index, func(st *store.Store) {
		if ins, err := dedup.NewMetaIntents(st).Intents(); err != nil || len(ins) != 0 {
			t.Errorf("intents left: %v, %v", ins, err)
		}
	})
}

func statOf(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// withStore runs fn with the index at path open and its writer running.
func withStore(t *testing.T, path string, fn func(*store.Store)) {
	t.Helper()
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	fn(st)
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("store run: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
