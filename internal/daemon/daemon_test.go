package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

func testConfig(t *testing.T, root string) config.Config {
	t.Helper()
	base := t.TempDir()
	cfg := config.Config{
		Roots:  []string{root},
		Index:  filepath.Join(base, "state", "index.db"),
		Socket: filepath.Join(base, "run", "annexd.sock"),
	}
	cfg.Hasher.Calibrate = "never"
	cfg.Watch.QuietDelay = 100 * time.Millisecond
	if err := cfg.Fill(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func writeOld(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
}

func TestNewRejectsBadRoots(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	writeOld(t, file, "x")
	for _, root := range []string{filepath.Join(dir, "missing"), file} {
		cfg := testConfig(t, root)
		_, err := New(cfg, nil, Options{})
		if !errors.Is(err, ErrRoot) || !strings.Contains(err.Error(), root) {
			t.Errorf("root %s: err = %v", root, err)
		}
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, dir)
	cfg.Roots = []string{dir, sub}
	if _, err := New(cfg, nil, Options{}); !errors.Is(err, ErrRoot) || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("overlapping roots: err = %v", err)
	}
	cfg.Roots = nil
	if _, err := New(cfg, nil, Options{}); !errors.Is(err, ErrNoRoots) {
		t.Errorf("no roots: err = %v", err)
	}
}

// A root given through a symlink is resolved once: every part gets the
// resolved path, and the API maps the given spelling to it.
func TestNewResolvesSymlinkedRoot(t *testing.T) {
	real, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	a, err := New(testConfig(t, link), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.cfg.Roots; len(got) != 1 || got[0] != real {
		t.Errorf("roots %q, want the resolved %s", got, real)
	}
	if got := a.roots.Aliases(); got[link] != real {
		t.Errorf("aliases %v, want %s → %s", got, link, real)
	}
}

// The daemon serves lookups, whereis, duplicates and status from a real
// index, and stops cleanly when its context ends.
func TestRunServesTheAPI(t *testing.T) {
	root := t.TempDir()
	writeOld(t, filepath.Join(root, "a/photo.JPG"), "same bytes")
	writeOld(t, filepath.Join(root, "b/copy.jpg"), "same bytes")
	writeOld(t, filepath.Join(root, "c/other.txt"), "other bytes")
	writeOld(t, filepath.Join(root, ".git/config"), "ignored by default")
	cfg := testConfig(t, root)
	_, end := runApp(t, cfg, nil)
	defer func() {
		if err := end(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	ctx := context.Background()

	c := api.Dial(cfg.Socket)
	defer c.Close()
	var st api.Status
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err = c.Status(ctx)
		if err == nil && st.Idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not idle: %+v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.Files != 3 || st.Version != "test" || len(st.Roots) != 1 || !st.Roots[0].ScanDone || !st.Watcher.Healthy {
		t.Errorf("status %+v", st)
	}

	sum := sha256.Sum256([]byte("same bytes"))
	r, err := c.Lookup(ctx, []byte(filepath.Join(root, "a/photo.JPG")), false)
	if err != nil || r.State != api.StateCurrent || !strings.HasSuffix(r.Key.String(), ".JPG") ||
		!strings.Contains(r.Key.String(), "-s10--") {
		t.Errorf("lookup: %+v %v", r, err)
	}
	if r, err := c.Lookup(ctx, []byte(filepath.Join(root, ".git/config")), false); err != nil || r.State != api.StateIgnored {
		t.Errorf("lookup of an ignored file: %+v %v", r, err)
	}
	if r, err := c.Lookup(ctx, []byte(filepath.Join(root, "a")), false); err != nil || r.State != api.StateNotRegular {
		t.Errorf("lookup of a directory: %+v %v", r, err)
	}

	var paths []string
	err = c.WhereisDigest(ctx, key.SHA256E, sum[:], func(l api.Location) error {
		paths = append(paths, string(l.Path))
		if l.Stale {
			t.Errorf("%s reported stale", l.Path)
		}
		return nil
	})
	if err != nil || len(paths) != 2 || paths[0] != filepath.Join(root, "a/photo.JPG") {
		t.Errorf("whereis: %v %v", paths, err)
	}

	var groups []api.DupGroup
	_, err = c.Dups(ctx, api.DupQuery{}, func(g api.DupGroup) error { groups = append(groups, g); return nil })
	if err != nil || len(groups) != 1 || len(groups[0].Files) != 2 || !bytes.Equal(groups[0].Digest, sum[:]) || groups[0].Duplicate != 10 {
		t.Errorf("dups: %+v %v", groups, err)
	}

	m, err := c.Metrics(ctx)
	if err != nil || !bytes.Contains(m, []byte("annexd_indexer_files_hashed_total 3")) ||
		!bytes.Contains(m, []byte("annexd_index_files 3")) || !bytes.Contains(m, []byte("annexd_index_duplicate_groups 1")) ||
		!bytes.Contains(m, []byte("annexd_watcher_watches{root=")) {
		t.Errorf("metrics lack the indexer's counters: %v\n%.2000s", err, m)
	}

	// The parts: the audit and deduplication answer; without [hub] or
	// [publish] the hub's endpoints say what to set.
	if as, err := c.AuditStatus(ctx); err != nil || as.State == "" {
		t.Errorf("audit status: %+v %v", as, err)
	}
	_, err = c.Dedup(ctx, api.DedupRequest{DryRun: true}, nil, func(api.DedupEvent) error { return nil })
	if err != nil && !errors.Is(err, api.ErrUnsupported) { // a file system without reflinks plans nothing
		t.Errorf("dedup dry run: %v", err)
	}
	var se *api.StatusError
	if _, err := c.HubHosts(ctx); !errors.Is(err, api.ErrNoHub) || !errors.As(err, &se) || se.Status != 404 ||
		!strings.Contains(se.Message, "[publish] hub") {
		t.Errorf("hub hosts without a hub: %v, want ErrNoHub, 404, naming [publish] hub", err)
	}
}

// A second daemon on the same index refuses to start and names the file.
func TestSecondInstanceRefused(t *testing.T) {
	root := t.TempDir()
	cfg := testConfig(t, root)
	_, end := runApp(t, cfg, nil)
	defer end()
	ctx := context.Background()
	c := api.Dial(cfg.Socket)
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := c.Ping(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("first daemon did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cfg2 := cfg
	cfg2.Socket = filepath.Join(t.TempDir(), "second.sock")
	app2, err := New(cfg2, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = app2.Run(context.Background())
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), cfg.Index) {
		t.Fatalf("second instance: %v", err)
	}
}

// A socket inside a root excludes the socket, not the directory it is in.
func TestSocketInsideRootKeepsRootIndexed(t *testing.T) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o700); err != nil { // a usable socket directory
		t.Fatal(err)
	}
	writeOld(t, filepath.Join(root, "f.txt"), "indexed")
	cfg := testConfig(t, root)
	cfg.Socket = filepath.Join(root, "annexd.sock")
	app, err := New(cfg, nil, Options{ExitWhenIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(cfg.Index, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, ok, err := st.Get([]byte(filepath.Join(root, "f.txt"))); err != nil || !ok {
		t.Errorf("f.txt beside the socket not indexed: ok=%v err=%v", ok, err)
	}
}
