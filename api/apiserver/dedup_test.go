package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
)

// dedupIndex is storeIndex with a Dedup that records the request and
// sends a fixed run. With block it waits, after a progress event, until
// the run's context ends, then sends a skip and returns what it did.
type dedupIndex struct {
	*storeIndex
	block bool
	err   error // returned before anything is sent

	mu  sync.Mutex
	got []api.DedupRequest
}

var testGroup = api.DedupGroup{Keeper: []byte("/k"), Size: 3, Frees: 3, Targets: [][]byte{[]byte("/t")}}

func (x *dedupIndex) Dedup(ctx context.Context, req api.DedupRequest, send func(api.DedupEvent) error) (api.DedupResult, error) {
	x.mu.Lock()
	x.got = append(x.got, req)
	x.mu.Unlock()
	res := api.DedupResult{Mode: "reflink", Planned: 1}
	if x.err != nil {
		return res, x.err
	}
	if err := send(api.DedupEvent{Plan: &api.DedupPlan{Mode: "reflink", Groups: 1, Actions: 1, Frees: 3}}); err != nil {
		return res, err
	}
	if err := send(api.DedupEvent{Group: &testGroup}); err != nil {
		return res, err
	}
	if !x.block {
		res.Done, res.Freed = 1, 3
		return res, nil
	}
	if err := send(api.DedupEvent{Progress: &api.DedupProgress{Done: 1, Total: 1}}); err != nil {
		return res, err
	}
	<-ctx.Done()
	res.Done, res.Skipped = 1, map[string]int{"changed": 1}
	send(api.DedupEvent{Skip: &api.DedupSkip{Keeper: []byte("/k"), Target: []byte("/u"), Reason: "changed"}})
	return res, ctx.Err()
}

func (x *dedupIndex) requests() []api.DedupRequest {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.got)
}

// A run's request reaches the Index with the paths as the index spells
// them and the caller's uid and groups from the socket, and its events
// and result come back in order.
func TestDedupStream(t *testing.T) {
	root := shortDir(t)
	x := &dedupIndex{storeIndex: newStoreIndex(t, root)}
	ts := startServer(t, Config{Parts: Parts{Index: x, Dedup: x}}, nil)
	odd := []byte(root + "/caf\xe9")
	req := api.DedupRequest{Paths: [][]byte{odd, []byte(root + "/a/../b/")}, Hardlink: true, DryRun: true, MinSize: 7,
		Groups: -1, Progress: true, UID: 12345, GIDs: []uint32{1}}
	var events []api.DedupEvent
	end, err := ts.client.Dedup(context.Background(), req, nil, func(ev api.DedupEvent) error {
		events = append(events, ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[0].Plan == nil || !reflect.DeepEqual(events[1].Group, &testGroup) {
		t.Errorf("events %+v", events)
	}
	if end.Count != 2 || end.Result == nil || end.Result.Done != 1 || end.Result.Freed != 3 || end.Code != "" {
		t.Errorf("end %+v", end)
	}
	got := x.requests()
	if len(got) != 1 {
		t.Fatalf("%d requests", len(got))
	}
	g := got[0]
	if !reflect.DeepEqual(g.Paths, [][]byte{odd, []byte(root + "/b")}) || !g.Hardlink || !g.DryRun || g.MinSize != 7 || g.Groups != -1 || !g.Progress {
		t.Errorf("request %+v", g)
	}
	groups, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	want := []uint32{uint32(os.Getegid())}
	for _, gid := range groups {
		want = append(want, uint32(gid))
	}
	if g.UID != uint32(os.Geteuid()) || !reflect.DeepEqual(g.GIDs, want) {
		t.Errorf("caller uid %d gids %v; want the socket's peer %d %v, not the body's", g.UID, g.GIDs, os.Geteuid(), want)
	}
}

// One path outside the roots refuses the whole request; nothing runs.
func TestDedupOutsideRoots(t *testing.T) {
	root := shortDir(t)
	x := &dedupIndex{storeIndex: newStoreIndex(t, root)}
	ts := startServer(t, Config{Parts: Parts{Index: x, Dedup: x}}, nil)
	_, err := ts.client.Dedup(context.Background(), api.DedupRequest{Paths: [][]byte{[]byte(root), []byte("/etc")}}, nil,
		func(api.DedupEvent) error { return nil })
	if !errors.Is(err, api.ErrOutsideRoots) {
		t.Errorf("err = %v, want ErrOutsideRoots", err)
	}
	if _, err := ts.client.Dedup(context.Background(), api.DedupRequest{Paths: [][]byte{[]byte("rel")}}, nil,
		func(api.DedupEvent) error { return nil }); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("relative path: err = %v", err)
	}
	if n := len(x.requests()); n != 0 {
		t.Errorf("Dedup called %d times", n)
	}
}

// Closing stop half-closes the request: the server cancels the run, which
// ends the stream with what it did, and the client reads that end.
func TestDedupStop(t *testing.T) {
	root := shortDir(t)
	x := &dedupIndex{storeIndex: newStoreIndex(t, root), block: true}
	ts := startServer(t, Config{Parts: Parts{Index: x, Dedup: x}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stop := make(chan struct{})
	var skips int
	end, err := ts.client.Dedup(ctx, api.DedupRequest{}, stop, func(ev api.DedupEvent) error {
		if ev.Progress != nil {
			close(stop)
		}
		if ev.Skip != nil {
			skips++
		}
		return nil
	})
	if ctx.Err() != nil {
		t.Fatal("the run did not stop when the client half-closed")
	}
	if !errors.Is(err, api.ErrInterrupted) || end.Code != api.CodeInterrupted {
		t.Errorf("err = %v, end %+v; want interrupted", err, end)
	}
	if end.Result == nil || end.Result.Done != 1 || end.Result.Skipped["changed"] != 1 || skips != 1 || end.Count != 4 {
		t.Errorf("end %+v (result %+v), %d skips", end, end.Result, skips)
	}
}

// A server shutting down stops a run and still sends its end.
func TestDedupShutdown(t *testing.T) {
	root := shortDir(t)
	x := &dedupIndex{storeIndex: newStoreIndex(t, root), block: true}
	ts := startServer(t, Config{Parts: Parts{Index: x, Dedup: x}}, nil)
	_, err := ts.client.Dedup(context.Background(), api.DedupRequest{}, nil, func(ev api.DedupEvent) error {
		if ev.Progress != nil {
			ts.cancel() // the cleanup waits for Run
		}
		return nil
	})
	if !errors.Is(err, api.ErrInterrupted) {
		t.Errorf("err = %v, want interrupted", err)
	}
}

func TestDedupErrors(t *testing.T) {
	root := shortDir(t)
	unsupported := fmt.Errorf("%w: ext4", api.ErrUnsupported)
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"before the plan", errors.New("index broken"), api.ErrServer},
		{"bad request", fmt.Errorf("%w: no", api.ErrBadRequest), api.ErrBadRequest},
	} {
		x := &dedupIndex{storeIndex: newStoreIndex(t, root), err: c.err}
		ts := startServer(t, Config{Parts: Parts{Index: x, Dedup: x}}, nil)
		_, err := ts.client.Dedup(context.Background(), api.DedupRequest{}, nil, func(api.DedupEvent) error { return nil })
		var se *api.StatusError
		if !errors.Is(err, c.want) || !errors.As(err, &se) {
			t.Errorf("%s: err = %v, want a status error matching %v", c.name, err, c.want)
		}
	}
	x := &unsupportedIndex{dedupIndex{storeIndex: newStoreIndex(t, root)}, unsupported}
	ts := startServer(t, Config{Parts: Parts{Index: x, Dedup: x}}, nil)
	end, err := ts.client.Dedup(context.Background(), api.DedupRequest{}, nil, func(api.DedupEvent) error { return nil })
	if !errors.Is(err, api.ErrUnsupported) || end.Result == nil || end.Result.Done != 1 {
		t.Errorf("unsupported: err = %v, end %+v", err, end)
	}
	plain := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, root)}}, nil)
	_, err = plain.client.Dedup(context.Background(), api.DedupRequest{}, nil, func(api.DedupEvent) error { return nil })
	var se *api.StatusError
	if !errors.As(err, &se) || se.Status != 404 || se.Code != api.CodeNotSupported || !strings.Contains(se.Message, "dedup part") {
		t.Errorf("server without a dedup part: err = %v, want 404 saying so", err)
	}
}

// unsupportedIndex finishes its run and then says a file system could
// not share extents.
type unsupportedIndex struct {
	dedupIndex
	err error
}

func (x *unsupportedIndex) Dedup(ctx context.Context, req api.DedupRequest, send func(api.DedupEvent) error) (api.DedupResult, error) {
	res, err := x.dedupIndex.Dedup(ctx, req, send)
	if err == nil {
		err = x.err
	}
	return res, err
}

// The groups parameter takes a count or "all"; anything else is refused.
func TestDedupGroupsParam(t *testing.T) {
	root := shortDir(t)
	x := &dedupIndex{storeIndex: newStoreIndex(t, root)}
	ts := startServer(t, Config{Parts: Parts{Index: x, Dedup: x}}, nil)
	hc := unixHTTP(ts.socket)
	for q, code := range map[string]int{"groups=all": 200, "groups=3": 200, "groups=x": 400, "groups=-1": 400, "dry_run=maybe": 400} {
		resp, err := hc.Post("http://annexd/v1/dedup?"+q, "application/x-ndjson", bytes.NewReader(nil))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("%s: status %d, want %d", q, resp.StatusCode, code)
		}
	}
}
