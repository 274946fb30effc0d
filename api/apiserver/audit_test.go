package apiserver

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
)

// auditIndex is storeIndex with an Auditor that keeps what it was asked:
// run 7 ends when finish is closed; problems lists one file whose name is
// not UTF-8.
type auditIndex struct {
	*storeIndex
	finish chan struct{}
	bad    []byte

	mu     sync.Mutex
	starts []api.AuditRequest
	paused bool
	accept [][]byte
}

func (x *auditIndex) AuditStart(_ context.Context, req api.AuditRequest) (uint64, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.starts = append(x.starts, req)
	return 7, nil
}

func (x *auditIndex) AuditRun(ctx context.Context, id uint64, wait bool) (api.AuditRun, error) {
	if id != 7 {
		return api.AuditRun{}, api.ErrNotFound
	}
	r := api.AuditRun{ID: 7, Manual: true, Began: time.Unix(100, 0), Counts: map[string]int64{"ok": 1}}
	if wait {
		select {
		case <-x.finish:
		case <-ctx.Done():
			return r, nil
		}
	}
	select {
	case <-x.finish:
		r.Ended, r.StoppedBy, r.Counts["corrupt"] = time.Unix(200, 0), api.AuditDone, 1
	default:
	}
	return r, nil
}

func (x *auditIndex) AuditStatus(context.Context) (api.AuditStatus, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	st := api.AuditStatus{State: "idle", Problems: 1}
	if x.paused {
		st.State = "paused"
	}
	return st, nil
}

func (x *auditIndex) AuditProblems(_ context.Context, fn func(api.AuditProblem) error) error {
	return fn(api.AuditProblem{Path: x.bad, State: "corrupt", Backend: "SHA256E", Recorded: []byte{1, 2}, Observed: []byte{3, 4},
		Size: 2, Seen: time.Unix(300, 0), Why: "digest differs"})
}

func (x *auditIndex) AuditPause(_ context.Context, paused bool) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.paused = paused
	return nil
}

func (x *auditIndex) AuditAccept(_ context.Context, path []byte) (api.AuditAcceptResult, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.accept = append(x.accept, path)
	if !bytes.Equal(path, x.bad) {
		return api.AuditAcceptResult{}, api.ErrNotFound
	}
	return api.AuditAcceptResult{Accepted: [][]byte{path}}, nil
}

func (x *auditIndex) AuditHistory(context.Context) ([]api.AuditPassSummary, error) {
	return []api.AuditPassSummary{{ID: 3, Began: time.Unix(100, 0), Ended: time.Unix(160, 0), Files: 4, Problems: 1,
		Counts: map[string]int64{"ok": 3, "corrupt": 1}, Coverage: &api.AuditCoverage{EverySeconds: 60, Files: 3, Total: 4}}}, nil
}

// Each audit route reaches the Auditor and its answer comes back whole: a
// run's options and paths, a long poll that ends with the run, a problem
// whose path is not UTF-8, pause and resume, accept.
func TestAuditRoutes(t *testing.T) {
	root := shortDir(t)
	x := &auditIndex{storeIndex: newStoreIndex(t, root), finish: make(chan struct{}), bad: []byte(filepath.Join(root, "caf\xe9"))}
	ts := startServer(t, Config{Parts: Parts{Index: x, Audit: x}}, nil)
	ctx := context.Background()
	c := ts.client
	id, err := c.AuditStart(ctx, api.AuditRequest{Paths: [][]byte{x.bad}, TimeLimit: time.Minute, FullSpeed: true})
	if err != nil || id != 7 {
		t.Fatalf("start: %d, %v", id, err)
	}
	if got := x.starts[0]; len(got.Paths) != 1 || !bytes.Equal(got.Paths[0], x.bad) || got.TimeLimit != time.Minute || !got.FullSpeed {
		t.Errorf("start request %+v", got)
	}
	if _, err := c.AuditStart(ctx, api.AuditRequest{Paths: [][]byte{[]byte("/etc")}}); !errors.Is(err, api.ErrOutsideRoots) {
		t.Errorf("start outside the roots: %v", err)
	}
	r, err := c.AuditRun(ctx, 7, 0)
	if err != nil || r.Done() || r.Counts["ok"] != 1 {
		t.Fatalf("run before its end: %+v, %v", r, err)
	}
	if r, err = c.AuditRun(ctx, 7, 10*time.Millisecond); err != nil || r.Done() {
		t.Fatalf("a long poll that timed out: %+v, %v", r, err)
	}
	go func() { time.Sleep(50 * time.Millisecond); close(x.finish) }()
	if r, err = c.AuditRun(ctx, 7, time.Minute); err != nil || !r.Done() || r.StoppedBy != api.AuditDone || r.Counts["corrupt"] != 1 {
		t.Fatalf("a long poll to the end: %+v, %v", r, err)
	}
	if _, err := c.AuditRun(ctx, 8, 0); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("unknown run: %v", err)
	}
	var ps []api.AuditProblem
	if err := c.AuditProblems(ctx, func(p api.AuditProblem) error { ps = append(ps, p); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || !bytes.Equal(ps[0].Path, x.bad) || !bytes.Equal(ps[0].Recorded, []byte{1, 2}) ||
		!bytes.Equal(ps[0].Observed, []byte{3, 4}) || ps[0].State != "corrupt" || !ps[0].Seen.Equal(time.Unix(300, 0)) {
		t.Errorf("problems %+v", ps)
	}
	if st, err := c.AuditPause(ctx); err != nil || st.State != "paused" {
		t.Errorf("pause: %+v, %v", st, err)
	}
	if st, err := c.AuditResume(ctx); err != nil || st.State != "idle" {
		t.Errorf("resume: %+v, %v", st, err)
	}
	if h, err := c.AuditHistory(ctx); err != nil || len(h) != 1 || h[0].ID != 3 || h[0].Problems != 1 ||
		h[0].Coverage == nil || h[0].Coverage.Files != 3 || !h[0].Ended.Equal(time.Unix(160, 0)) {
		t.Errorf("history: %+v, %v", h, err)
	}
	res, err := c.AuditAccept(ctx, x.bad)
	if err != nil || len(res.Accepted) != 1 || !bytes.Equal(res.Accepted[0], x.bad) {
		t.Errorf("accept: %+v, %v", res, err)
	}
	if _, err := c.AuditAccept(ctx, []byte(filepath.Join(root, "fine"))); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("accept of a file not flagged: %v", err)
	}
}

// A daemon without an audit part answers 404, saying what is off.
func TestAuditNotSupported(t *testing.T) {
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, shortDir(t))}}, nil)
	if _, err := ts.client.AuditStatus(context.Background()); err == nil || !errors.As(err, new(*api.StatusError)) {
		t.Fatalf("err = %v", err)
	} else if se := err.(*api.StatusError); se.Status != 404 || se.Code != api.CodeNotSupported || !strings.Contains(se.Message, "audit part") {
		t.Errorf("status %d %s: %s", se.Status, se.Code, se.Message)
	}
}
