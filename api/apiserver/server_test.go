package apiserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
)

// wantKey is the SHA256E key git-annex gives content under name, computed
// here independently of the hasher and key packages.
func wantKey(content, ext string) string {
	sum := sha256.Sum256([]byte(content))
	return fmt.Sprintf("SHA256E-s%d--%s%s", len(content), hex.EncodeToString(sum[:]), ext)
}

func TestLookupFreshness(t *testing.T) {
	root := t.TempDir()
	f := writeFile(t, root, "a.txt", "hello")
	idx := newStoreIndex(t, root)
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	c, ctx := ts.client, context.Background()

	r, err := c.Lookup(ctx, []byte(f), false)
	if err != nil || r.State != api.StatePending || !r.Key.IsZero() {
		t.Fatalf("before indexing: %+v, %v; want pending without key", r, err)
	}
	r, err = c.Lookup(ctx, []byte(f), true)
	if err != nil || r.State != api.StateCurrent || r.Key.String() != wantKey("hello", ".txt") {
		t.Fatalf("wait: %+v, %v; want current %s", r, err, wantKey("hello", ".txt"))
	}
	if string(r.Path) != f || r.Size != 5 {
		t.Errorf("path %q size %d", r.Path, r.Size)
	}
	if r, err = c.Lookup(ctx, []byte(f), false); err != nil || r.State != api.StateCurrent {
		t.Fatalf("indexed: %+v, %v", r, err)
	}

	// A rewrite must never be answered with the old key.
	if err := os.WriteFile(f, []byte("hello, world"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err = c.Lookup(ctx, []byte(f), false); err != nil || r.State != api.StatePending || !r.Key.IsZero() {
		t.Fatalf("after rewrite: %+v, %v; want pending", r, err)
	}
	if r, err = c.Lookup(ctx, []byte(f), true); err != nil || r.Key.String() != wantKey("hello, world", ".txt") {
		t.Fatalf("after rewrite, wait: %+v, %v", r, err)
	}

	// Lexical cleaning, then states of things that have no key.
	r, err = c.Lookup(ctx, []byte(root+"/sub/../a.txt"), false)
	if err != nil || string(r.Path) != f || r.State != api.StateCurrent {
		t.Errorf("uncleaned path: %+v, %v", r, err)
	}
	if r, _ = c.Lookup(ctx, []byte(root+"/nope"), true); r.State != api.StateMissing {
		t.Errorf("missing file: %+v", r)
	}
	if r, _ = c.Lookup(ctx, []byte(root), true); r.State != api.StateNotRegular {
		t.Errorf("directory: %+v", r)
	}
}

func TestLookupNonUTF8(t *testing.T) {
	root := t.TempDir()
	name := "caf\xe9 \x01\"q\\.JPG" // Latin-1 byte, a control byte, quote, backslash
	f := writeFile(t, root, name, "pixels")
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, root)}}, nil)
	r, err := ts.client.Lookup(context.Background(), []byte(f), true)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Path, []byte(f)) {
		t.Errorf("path %q, want %q byte for byte", r.Path, f)
	}
	if r.Key.String() != wantKey("pixels", ".JPG") {
		t.Errorf("key %s", r.Key)
	}
	var got []api.LookupResult
	err = ts.client.LookupBatch(context.Background(), [][]byte{[]byte(f)}, false, func(r api.LookupResult) error {
		got = append(got, r)
		return nil
	})
	if err != nil || len(got) != 1 || !bytes.Equal(got[0].Path, []byte(f)) || got[0].State != api.StateCurrent {
		t.Errorf("batch: %+v, %v", got, err)
	}
}

func TestLookupOutsideRootsAndBadPaths(t *testing.T) {
	root := t.TempDir()
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, root)}}, nil)
	ctx := context.Background()
	for _, p := range []string{"/etc/passwd", root + "x/a", filepath.Dir(root)} {
		_, err := ts.client.Lookup(ctx, []byte(p), false)
		var se *api.StatusError
		if !errors.Is(err, api.ErrOutsideRoots) || !errors.As(err, &se) || se.Status != 400 {
			t.Errorf("%s: %v; want 400 outside_roots", p, err)
		}
	}
	for _, p := range []string{"relative/x", "", "/a\x00b"} {
		if _, err := ts.client.Lookup(ctx, []byte(p), false); !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("%q: %v; want bad request", p, err)
		}
	}
}

func TestLookupBatch(t *testing.T) {
	root := t.TempDir()
	idx := newStoreIndex(t, root)
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	ctx := context.Background()
	var paths [][]byte
	for i := range 50 {
		paths = append(paths, []byte(writeFile(t, root, fmt.Sprintf("d/f%02d.dat", i), fmt.Sprint(i))))
	}
	paths = append(paths, []byte("/outside/x"), []byte(root+"/missing"), []byte(root+"/bad\xff"))
	var got []api.LookupResult
	err := ts.client.LookupBatch(ctx, paths, true, func(r api.LookupResult) error {
		got = append(got, r)
		return nil
	})
	if err != nil || len(got) != len(paths) {
		t.Fatalf("%d answers, %v", len(got), err)
	}
	for i := range 50 {
		if got[i].State != api.StateCurrent || got[i].Key.String() != wantKey(fmt.Sprint(i), ".dat") ||
			!bytes.Equal(got[i].Path, paths[i]) {
			t.Errorf("answer %d: %+v", i, got[i])
		}
	}
	want := []api.LookupState{api.StateOutsideRoots, api.StateMissing, api.StateMissing}
	for i, w := range want {
		if g := got[50+i]; g.State != w || !bytes.Equal(g.Path, paths[50+i]) {
			t.Errorf("answer %d: %+v, want %s", 50+i, g, w)
		}
	}
}

// TestLookupBatchMalformedLines sends a hand-written body: bad lines get
// state invalid in place and do not stop the batch.
func TestLookupBatchMalformedLines(t *testing.T) {
	root := t.TempDir()
	f := writeFile(t, root, "ok", "x")
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, root)}}, nil)
	body := strings.Join([]string{
		`{"path":"` + f + `"}`,
		`not json`,
		`{"path_b64":"%%%"}`,
		`{}`,
		`{"path":"relative"}`,
		``, // blank lines are skipped
		`{"path":"` + f + `"}`,
	}, "\n")
	resp, err := unixHTTP(ts.socket).Post("http://annexd/v1/lookup", "application/x-ndjson", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if err != nil || len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], `{"end":true,"count":6`) {
		t.Fatalf("answer %q, %v", out, err)
	}
	var states []api.LookupState
	for _, line := range lines[:len(lines)-1] {
		var r api.LookupResult
		if err := r.UnmarshalJSON([]byte(line)); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		states = append(states, r.State)
	}
	want := []api.LookupState{api.StatePending, api.StateInvalid, api.StateInvalid, api.StateInvalid, api.StateInvalid, api.StatePending}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Errorf("states %v; want %v", states, want)
	}
}

func TestWhereis(t *testing.T) {
	root := t.TempDir()
	a := writeFile(t, root, "a.JPG", "same bytes")
	b := writeFile(t, root, "sub/b.jpg", "same bytes")
	c := writeFile(t, root, "c.txt", "other")
	idx := newStoreIndex(t, root)
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	ctx := context.Background()
	keys := map[string]key.Key{}
	for _, p := range []string{a, b, c} {
		r, err := ts.client.Lookup(ctx, []byte(p), true)
		if err != nil || r.State != api.StateCurrent {
			t.Fatalf("%s: %+v %v", p, r, err)
		}
		keys[p] = r.Key
	}
	collect := func(f func(fn func(api.Location) error) error) ([]api.Location, error) {
		var out []api.Location
		err := f(func(l api.Location) error { out = append(out, l); return nil })
		return out, err
	}
	locs, err := collect(func(fn func(api.Location) error) error { return ts.client.WhereisKey(ctx, keys[a], fn) })
	if err != nil || len(locs) != 2 {
		t.Fatalf("by key: %+v %v", locs, err)
	}
	for _, l := range locs {
		if l.Key != keys[string(l.Path)] || l.Stale || l.Size != 10 {
			t.Errorf("location %+v; key want %s", l, keys[string(l.Path)])
		}
	}
	d, _ := keys[c].Digest()
	locs, err = collect(func(fn func(api.Location) error) error { return ts.client.WhereisDigest(ctx, key.SHA256, d, fn) })
	if err != nil || len(locs) != 1 || string(locs[0].Path) != c {
		t.Errorf("by digest: %+v %v", locs, err)
	}
	locs, err = collect(func(fn func(api.Location) error) error { return ts.client.WhereisPath(ctx, []byte(b), false, fn) })
	if err != nil || len(locs) != 2 {
		t.Errorf("by path: %+v %v", locs, err)
	}
	// A changed copy is reported stale, not as a current location.
	if err := os.WriteFile(b, []byte("changed!!!"), 0o644); err != nil {
		t.Fatal(err)
	}
	locs, _ = collect(func(fn func(api.Location) error) error { return ts.client.WhereisKey(ctx, keys[a], fn) })
	for _, l := range locs {
		if string(l.Path) == b && !l.Stale {
			t.Errorf("changed file not stale: %+v", l)
		}
	}
	// The changed file itself has no current key to look for.
	_, err = collect(func(fn func(api.Location) error) error { return ts.client.WhereisPath(ctx, []byte(b), false, fn) })
	if !errors.Is(err, api.ErrNotFound) {
		t.Errorf("changed path: %v, want not found", err)
	}
	unknown, _ := key.Parse(wantKey("never seen", ""))
	if locs, err = collect(func(fn func(api.Location) error) error { return ts.client.WhereisKey(ctx, unknown, fn) }); err != nil || len(locs) != 0 {
		t.Errorf("unknown key: %+v %v", locs, err)
	}
}

func TestDupsOrderAndPaging(t *testing.T) {
	root := t.TempDir()
	idx := newStoreIndex(t, root)
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	ctx := context.Background()
	big, mid, small := strings.Repeat("B", 1000), strings.Repeat("m", 100), "tiny"
	files := map[string]string{
		"b1": big, "b2": big, // wasted 1000
		"m1": mid, "m2": mid, "m3": mid, // wasted 200
		"s1": small, "s2": small, // wasted 4
		"u": "unique",
	}
	for name, content := range files {
		p := writeFile(t, root, name, content)
		if _, err := ts.client.Lookup(ctx, []byte(p), true); err != nil {
			t.Fatal(err)
		}
	}
	// A hardlink is the same file, not a duplicate.
	if err := os.Link(filepath.Join(root, "b1"), filepath.Join(root, "b1.link")); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.Lookup(ctx, []byte(filepath.Join(root, "b1.link")), true); err != nil {
		t.Fatal(err)
	}

	var wasted []int64
	var after []byte
	for page := 0; ; page++ {
		next, err := ts.client.Dups(ctx, api.DupQuery{Limit: 1, After: after}, func(g api.DupGroup) error {
			wasted = append(wasted, g.Duplicate)
			if g.Duplicate != g.Size*int64(distinctInodes(t, g.Files)-1) {
				t.Errorf("group %x: wasted %d for %d files of %d", g.Digest, g.Duplicate, len(g.Files), g.Size)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if next == nil || page > 10 {
			break
		}
		after = next
	}
	if fmt.Sprint(wasted) != "[1000 200 4]" {
		t.Errorf("wasted by page %v, want [1000 200 4]", wasted)
	}
	wasted = nil
	next, err := ts.client.Dups(ctx, api.DupQuery{MinSize: 50}, func(g api.DupGroup) error {
		wasted = append(wasted, g.Duplicate)
		return nil
	})
	if err != nil || next != nil || fmt.Sprint(wasted) != "[1000 200]" {
		t.Errorf("min size 50: %v next %q %v", wasted, next, err)
	}
}

func distinctInodes(t *testing.T, files []api.Location) int {
	seen := map[uint64]bool{}
	for _, f := range files {
		fi, err := os.Stat(string(f.Path))
		if err != nil {
			t.Fatal(err)
		}
		seen[fileIno(fi)] = true
	}
	return len(seen)
}

func TestStatusAndWaitIdle(t *testing.T) {
	root := t.TempDir()
	idx := newStoreIndex(t, root)
	ts := startServer(t, Config{Parts: Parts{Index: idx}, Version: "9.9"}, nil)
	ctx := context.Background()
	st, err := ts.client.Status(ctx)
	if err != nil || st.APIVersion != api.APIVersion || len(st.Roots) != 1 || st.Roots[0].Path != root || !st.Idle {
		t.Fatalf("status %+v %v", st, err)
	}
	p, err := ts.client.Ping(ctx)
	if err != nil || !p.OK || p.Version != "9.9" || p.APIVersion != api.APIVersion {
		t.Errorf("ping %+v %v", p, err)
	}

	idx.idle.Store(false)
	st, err = ts.client.WaitIdle(ctx, 50*time.Millisecond)
	if err != nil || st.Idle {
		t.Errorf("wait with short timeout: idle %v, %v; want not idle, no error", st.Idle, err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		idx.idle.Store(true)
	}()
	st, err = ts.client.WaitIdle(ctx, time.Minute)
	if err != nil || !st.Idle {
		t.Errorf("wait: idle %v, %v", st.Idle, err)
	}
}

// TestShutdown: a long poll returns when the server stops, Run returns
// nil, and the socket is gone.
func TestShutdown(t *testing.T) {
	idx := newStoreIndex(t, t.TempDir())
	idx.idle.Store(false)
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	if _, err := ts.client.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := ts.client.WaitIdle(context.Background(), 4*time.Minute)
		res <- err
	}()
	// The poll has reached the handler once it asked for the status.
	for deadline := time.Now().Add(20 * time.Second); idx.statuses.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the long poll never reached the server")
		}
	}
	if err := ts.stop(); err != nil {
		t.Errorf("run: %v", err)
	}
	if err := <-res; err != nil {
		t.Errorf("long poll during shutdown: %v", err)
	}
	if _, err := os.Lstat(ts.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if _, err := api.Dial(ts.socket).Ping(context.Background()); !errors.Is(err, api.ErrNoDaemon) {
		t.Errorf("after stop: %v, want api.ErrNoDaemon", err)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	daemonMetric := prometheus.NewCounter(prometheus.CounterOpts{Name: "annexd_files_hashed_total", Help: "test"})
	reg.MustRegister(daemonMetric)
	daemonMetric.Add(7)
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, t.TempDir())}, Registerer: reg, Gatherer: reg}, nil)
	ctx := context.Background()
	if _, err := ts.client.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := ts.client.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`annexd_api_requests_total{code="200",route="GET /v1/ping"} 1`,
		`annexd_files_hashed_total 7`,
		`annexd_api_request_duration_seconds_bucket{route="GET /v1/ping"`,
	} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestNoDaemon(t *testing.T) {
	sock := filepath.Join(shortDir(t), "nothing.sock")
	_, err := api.Dial(sock).Status(context.Background())
	var nd *api.NoDaemonError
	if !errors.Is(err, api.ErrNoDaemon) || !errors.As(err, &nd) || nd.Socket != sock {
		t.Errorf("err %v; want *api.NoDaemonError for %s", err, sock)
	}
}

func TestTCPToken(t *testing.T) {
	const token = "0123456789abcdef-secret"
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, t.TempDir())}, TCPAddr: "127.0.0.1:0", Token: token}, nil)
	addr := ts.srv.TCPAddr().String()
	ctx := context.Background()
	if _, err := api.DialTCP(addr, token).Ping(ctx); err != nil {
		t.Errorf("right token: %v", err)
	}
	for _, tok := range []string{"", "0123456789abcdef-secreT", token + "x"} {
		if _, err := api.DialTCP(addr, tok).Ping(ctx); !errors.Is(err, api.ErrUnauthorized) {
			t.Errorf("token %q: %v, want unauthorized", tok, err)
		}
	}
	for _, bad := range []Config{
		{TCPAddr: "0.0.0.0:7777", Token: token},
		{TCPAddr: "192.168.1.1:7777", Token: token},
		{TCPAddr: "127.0.0.1:7777", Token: "short"},
	} {
		bad.Index, bad.Socket = newStoreIndex(t, "/"), "/tmp/x.sock"
		if _, err := NewServer(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", bad, err)
		}
	}
}

// dupsRecorder is a storeIndex that remembers the dups queries it got.
type dupsRecorder struct {
	*storeIndex
	mu      sync.Mutex
	queries []api.DupQuery
}

func (x *dupsRecorder) Dups(ctx context.Context, q api.DupQuery, fn func(api.DupGroup) error) error {
	x.mu.Lock()
	x.queries = append(x.queries, q)
	x.mu.Unlock()
	return x.storeIndex.Dups(ctx, q, fn)
}

// TestDupsPathsReachIndex: dups' paths reach the index cleaned and as
// the index stores them, with resurvey; a path outside the roots refuses
// the request.
func TestDupsPathsReachIndex(t *testing.T) {
	root := t.TempDir()
	idx := &dupsRecorder{storeIndex: newStoreIndex(t, root)}
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	ctx := context.Background()
	odd := []byte(root + "/caf\xe9")
	q := api.DupQuery{Paths: [][]byte{odd, []byte(root + "/a/../b/")}, Resurvey: true, Limit: 3}
	if _, err := ts.client.Dups(ctx, q, func(api.DupGroup) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.Dups(ctx, api.DupQuery{}, func(api.DupGroup) error { return nil }); err != nil {
		t.Fatal(err)
	}
	idx.mu.Lock()
	got := idx.queries
	idx.mu.Unlock()
	if len(got) != 2 || !reflect.DeepEqual(got[0].Paths, [][]byte{odd, []byte(root + "/b")}) || !got[0].Resurvey ||
		got[0].Limit != 3 || got[1].Paths != nil || got[1].Resurvey {
		t.Errorf("queries %+v", got)
	}
	q.Paths = append(q.Paths, []byte("/etc"))
	if _, err := ts.client.Dups(ctx, q, func(api.DupGroup) error { return nil }); !errors.Is(err, api.ErrOutsideRoots) {
		t.Errorf("a path outside the roots: %v, want ErrOutsideRoots", err)
	}
}
