package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/internal/testutil"
	"github.com/annexd/annexd/key"
)

// runUntilIdle runs an App on cfg until the test ends or stop is called,
// and returns a client once it is idle.
func runUntilIdle(t *testing.T, cfg config.Config, log *slog.Logger) (c *api.Client, stop func()) {
	t.Helper()
	_, c, stop = startIdle(t, cfg, log)
	return c, stop
}

// runApp makes an App of cfg and runs it. end cancels the run and returns
// what Run returned; the test fails when Run takes over 20 s to return.
// end may be called more than once.
func runApp(t testing.TB, cfg config.Config, log *slog.Logger) (app *App, end func() error) {
	t.Helper()
	app, err := New(cfg, log, Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	var once sync.Once
	var runErr error
	end = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(20 * time.Second):
				t.Error("Run did not return within 20 s of cancel")
			}
		})
		return runErr
	}
	return app, end
}

// startIdle is runUntilIdle that also returns the App.
func startIdle(t *testing.T, cfg config.Config, log *slog.Logger) (app *App, c *api.Client, stop func()) {
	t.Helper()
	app, end := runApp(t, cfg, log)
	stop = func() {
		if err := end(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	ctx := context.Background()
	c = api.Dial(cfg.Socket)
	t.Cleanup(c.Close)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Status(ctx)
		if err == nil && st.Idle && st.OutsideRootsChecked {
			return app, c, stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("not idle: %+v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Records left from a run with a wider root are listed in status and
// metrics, marked in whereis, hidden from dups unless asked for, and
// dropped by forget, which keeps the records under the roots.
func TestRecordsOutsideRoots(t *testing.T) {
	base := t.TempDir()
	a, b := filepath.Join(base, "A"), filepath.Join(base, "B")
	writeOld(t, filepath.Join(base, "top.txt"), "top")
	writeOld(t, filepath.Join(a, "x.jpg"), "same bytes")
	writeOld(t, filepath.Join(a, "x2.jpg"), "same bytes")
	writeOld(t, filepath.Join(a, "h1"), "linked")
	if err := os.Link(filepath.Join(a, "h1"), filepath.Join(a, "h2")); err != nil {
		t.Fatal(err)
	}
	writeOld(t, filepath.Join(b, "copy.jpg"), "same bytes")
	writeOld(t, filepath.Join(b, "sub/copy2.jpg"), "same bytes")
	writeOld(t, filepath.Join(b, "z"), "only in B")
	writeOld(t, filepath.Join(b, "sub/z2"), "only in B")
	writeOld(t, filepath.Join(b, "h3"), "linked")

	cfg := testConfig(t, base)
	_, stop := runUntilIdle(t, cfg, nil)
	stop()

	cfg.Roots = []string{a}
	var logBuf testutil.Buffer
	c, _ := runUntilIdle(t, cfg, slog.New(slog.NewTextHandler(&logBuf, nil)))
	ctx := context.Background()

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.OutsideRoot{{Path: base, Direct: true, Dirs: 1, Files: 1}, {Path: b, Dirs: 2, Files: 5}}
	if !equalOutside(st.OutsideRoots, want) || st.Files != 10 {
		t.Errorf("status: %d files, outside %+v; want 10, %+v", st.Files, st.OutsideRoots, want)
	}
	if l := logBuf.String(); !strings.Contains(l, "outside the roots") || !strings.Contains(l, b+" (5 files)") ||
		!strings.Contains(l, "annexctl forget") {
		t.Errorf("no warning naming %s and the fix:\n%s", b, l)
	}
	m, err := c.Metrics(ctx)
	if err != nil || !bytes.Contains(m, []byte("annexd_index_outside_roots_files 6")) {
		t.Errorf("metrics: %v\n%.3000s", err, m)
	}

	same := sha256.Sum256([]byte("same bytes"))
	var where []string
	err = c.WhereisDigest(ctx, key.SHA256E, same[:], func(l api.Location) error {
		if l.OutsideRoots != strings.HasPrefix(string(l.Path), b+"/") {
			t.Errorf("%s: outside_roots %v", l.Path, l.OutsideRoots)
		}
		where = append(where, string(l.Path))
		return nil
	})
	if err != nil || len(where) != 4 {
		t.Errorf("whereis: %v %v", where, err)
	}

	// Hidden by default: one group left, of A's two copies.
	groups := dups(t, c, api.DupQuery{})
	if len(groups) != 1 || len(groups[0].Files) != 2 || groups[0].Duplicate != 10 || groups[0].Files[0].OutsideRoots {
		t.Errorf("dups without outside: %+v", groups)
	}
	if g := dups(t, c, api.DupQuery{Limit: 1}); len(g) != 1 {
		t.Errorf("dups limit 1: %d groups", len(g))
	}
	// With them, marked: three groups at their whole waste.
	groups = dups(t, c, api.DupQuery{Outside: true})
	if len(groups) != 3 || groups[0].Duplicate != 30 || len(groups[0].Files) != 4 {
		t.Fatalf("dups with outside: %+v", groups)
	}
	for _, g := range groups {
		for _, f := range g.Files {
			if f.OutsideRoots != strings.HasPrefix(string(f.Path), b+"/") {
				t.Errorf("%s: outside_roots %v", f.Path, f.OutsideRoots)
			}
		}
	}

	// Forget: a dry run counts, a subdirectory goes, a root is refused.
	if r, err := c.Forget(ctx, []byte(b), true); err != nil || r.Files != 5 || !r.DryRun {
		t.Errorf("forget --dry-run %s: %+v %v", b, r, err)
	}
	if r, err := c.Forget(ctx, []byte(filepath.Join(b, "sub")), false); err != nil || r.Files != 2 {
		t.Errorf("forget B/sub: %+v %v", r, err)
	}
	st, _ = c.Status(ctx)
	want = []api.OutsideRoot{{Path: base, Direct: true, Dirs: 1, Files: 1}, {Path: b, Dirs: 1, Files: 3}}
	if !equalOutside(st.OutsideRoots, want) || st.Files != 8 {
		t.Errorf("after forget B/sub: %d files, outside %+v; want 8, %+v", st.Files, st.OutsideRoots, want)
	}
	for _, bad := range []string{a, filepath.Join(a, "sub")} {
		if _, err := c.Forget(ctx, []byte(bad), false); !errors.Is(err, api.ErrUnderRoot) ||
			!strings.Contains(err.Error(), "next scan") {
			t.Errorf("forget %s: %v, want ErrUnderRoot", bad, err)
		}
	}
	for _, bad := range []string{"rel/dir", base + "/B/../B", base + "/"} {
		if _, err := c.Forget(ctx, []byte(bad), false); !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("forget %q: %v, want ErrBadRequest", bad, err)
		}
	}

	// The parent of the root: everything outside A goes, A stays.
	r, err := c.Forget(ctx, []byte(base), false)
	if err != nil || r.Files != 4 || len(r.Kept) != 1 || r.Kept[0] != a {
		t.Errorf("forget %s: %+v %v", base, r, err)
	}
	st, _ = c.Status(ctx)
	if len(st.OutsideRoots) != 0 || st.Files != 4 || !st.OutsideRootsChecked {
		t.Errorf("after forgetting everything outside: %d files, outside %+v", st.Files, st.OutsideRoots)
	}
	if g := dups(t, c, api.DupQuery{Outside: true}); len(g) != 1 {
		t.Errorf("dups after forget: %+v", g)
	}
	if r, err := c.Forget(ctx, []byte(b), false); err != nil || r.Files != 0 {
		t.Errorf("forget of a forgotten directory: %+v %v", r, err)
	}
}

func dups(t *testing.T, c *api.Client, q api.DupQuery) []api.DupGroup {
	t.Helper()
	var out []api.DupGroup
	if _, err := c.Dups(context.Background(), q, func(g api.DupGroup) error { out = append(out, g); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func equalOutside(got, want []api.OutsideRoot) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// Pages of dups step over groups whose members are all (but one inode)
// outside the roots without skipping or repeating a visible group, and
// forget of a root's prefix siblings or of "/" keeps the root's records.
func TestDupsPagesAndForgetAroundRoot(t *testing.T) {
	base := t.TempDir()
	a := filepath.Join(base, "A")
	for p, content := range map[string]string{
		"A/s1": "same bytes", "A/s2": "same bytes", "B/s3": "same bytes", // 10 × 2 wasted, 30 in all
		"B/o1": "only in B", "B/o2": "only in B", // 9, hidden
		"A/h1": "linked", "B/h2": "linked", // 6, hidden (one inode left)
		"A.bak/s4": "same bytes", "A2/o3": "only in B", // prefix siblings of A
		"A/p1": "pair", "A/p2": "pair", // 4, visible after the hidden ones
	} {
		writeOld(t, filepath.Join(base, p), content)
	}
	cfg := testConfig(t, base)
	_, stop := runUntilIdle(t, cfg, nil)
	stop()
	cfg.Roots = []string{a}
	c, _ := runUntilIdle(t, cfg, nil)
	ctx := context.Background()

	for _, limit := range []int{1, 2, 3} {
		var got []string
		var after []byte
		for page := 0; ; page++ {
			if page > 4 {
				t.Fatalf("limit %d: more pages than groups: %v", limit, got)
			}
			n := 0
			next, err := c.Dups(ctx, api.DupQuery{Limit: limit, After: after}, func(g api.DupGroup) error {
				n++
				got = append(got, fmt.Sprintf("%d:%d", len(g.Files), g.Duplicate))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if n > limit {
				t.Errorf("limit %d: page of %d groups", limit, n)
			}
			if next == nil {
				break
			}
			after = next
		}
		if fmt.Sprint(got) != "[2:10 2:4]" {
			t.Errorf("limit %d: pages gave %v, want [2:10 2:4]", limit, got)
		}
	}

	for _, dir := range []string{"A.bak", "A2"} {
		r, err := c.Forget(ctx, []byte(filepath.Join(base, dir)), false)
		if err != nil || r.Files != 1 || len(r.Kept) != 0 {
			t.Errorf("forget %s: %+v %v", dir, r, err)
		}
	}
	r, err := c.Forget(ctx, []byte("/"), false)
	if err != nil || r.Files != 4 || len(r.Kept) != 1 || r.Kept[0] != a {
		t.Errorf("forget /: %+v %v", r, err)
	}
	st, err := c.Status(ctx)
	if err != nil || st.Files != 5 || len(st.OutsideRoots) != 0 {
		t.Errorf("after forget /: %d files, outside %+v, %v; want A's 5", st.Files, st.OutsideRoots, err)
	}
}

// A forget runs to the end once asked, even when the client leaves: the
// index and the status then agree on what is left outside the roots.
func TestForgetOutlivesItsRequest(t *testing.T) {
	base := t.TempDir()
	a, b := filepath.Join(base, "A"), filepath.Join(base, "B")
	writeOld(t, filepath.Join(a, "x"), "x")
	writeOld(t, filepath.Join(b, "y"), "y")
	writeOld(t, filepath.Join(b, "sub/z"), "z")
	cfg := testConfig(t, base)
	_, stop := runUntilIdle(t, cfg, nil)
	stop()
	cfg.Roots = []string{a}
	app, c, _ := startIdle(t, cfg, nil)

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := app.query.Forget(gone, []byte(base), false)
	if err != nil || r.Files != 2 {
		t.Errorf("forget with its request gone: %+v %v; want 2 records dropped", r, err)
	}
	st, err := c.Status(context.Background())
	if err != nil || st.Files != 1 || len(st.OutsideRoots) != 0 {
		t.Errorf("status: %d files, outside %+v, %v; want A's 1 and nothing outside", st.Files, st.OutsideRoots, err)
	}
}
