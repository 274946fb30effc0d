package audit

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/indexer"
	"github.com/annexd/annexd/internal/testutil"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// env is an auditor over a real index of a temp tree, kept by a real
// indexer (without a watcher: the tests change files behind its back).
type env struct {
	t      testing.TB
	root   string
	index  string
	st     *store.Store
	h      *hasher.Hasher
	ix     *indexer.Indexer
	a      *Auditor
	log    *testutil.Buffer
	stop   func()
	policy *hasher.Policy // nil: hasher.DefaultPolicy
}

// envOptions are the Options every test starts from: no rate cap, gates
// that never close, no jitter.
func envOptions() Options {
	return Options{Config: Config{MaxRate: -1, MaxLoad: -1, IgnoreBattery: true, Jitter: -1, Disabled: true}}
}

// newEnv indexes root (a temp dir when "") and starts an auditor with o.
func newEnv(t testing.TB, root string, o Options) *env {
	t.Helper()
	if root == "" {
		root = t.TempDir()
	}
	e := &env{t: t, root: root, index: filepath.Join(t.TempDir(), "index.db"), log: &testutil.Buffer{}}
	e.start(o)
	return e
}

// newEnvPolicy is newEnv with a hasher of policy p.
func newEnvPolicy(t testing.TB, root string, o Options, p hasher.Policy) *env {
	t.Helper()
	if root == "" {
		root = t.TempDir()
	}
	e := &env{t: t, root: root, index: filepath.Join(t.TempDir(), "index.db"), log: &testutil.Buffer{}, policy: &p}
	e.start(o)
	return e
}

func (e *env) start(o Options) {
	t := e.t
	st, err := store.Open(e.index, store.Options{NoSync: true, MaxDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.st = st
	p := hasher.DefaultPolicy()
	if e.policy != nil {
		p = *e.policy
	}
	e.h = hasher.New(p, nil)
	logger := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The indexer shares the audit's write ledger, as the daemon wires them.
	io := indexer.Options{Roots: []string{e.root}, Logger: logger}
	if o.SyncWrites != nil {
		io.Watches = syncOnly(o.SyncWrites)
	}
	if o.Ledger != nil {
		io.Ledger = o.Ledger
	}
	ix, err := indexer.New(st, e.h, io)
	if err != nil {
		t.Fatal(err)
	}
	e.ix = ix
	o.Indexer = ix
	o.Logger = logger
	a, err := New(st, e.h, o)
	if err != nil {
		t.Fatal(err)
	}
	e.a = a
	ctx, cancel := context.WithCancel(context.Background())
	storeCtx, stopStore := context.WithCancel(context.Background())
	var wg, storeWG sync.WaitGroup
	storeWG.Add(1)
	go func() {
		defer storeWG.Done()
		if err := st.Run(storeCtx); err != nil {
			t.Errorf("store.Run: %v", err)
		}
	}()
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := ix.Run(ctx); err != nil {
			t.Errorf("indexer.Run: %v", err)
		}
	}()
	ix.Rescan(e.root)
	e.settle()
	go func() {
		defer wg.Done()
		if err := a.Run(ctx); err != nil {
			t.Errorf("audit.Run: %v", err)
		}
	}()
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			stopStore()
			storeWG.Wait()
			rep, err := st.Check()
			if err != nil || !rep.OK() {
				t.Errorf("index check: %v %v", err, rep.Problems)
			}
			e.h.Close()
			if err := st.Close(); err != nil {
				t.Errorf("store close: %v", err)
			}
		})
	}
	t.Cleanup(e.stop)
	waitFor(t, "the auditor to start", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.started && !a.cover.At.IsZero()
	})
}

// restart stops everything and starts again on the same index with o.
func (e *env) restart(o Options) {
	e.stop()
	e.start(o)
}

// settle waits until the indexer is idle.
func (e *env) settle() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.ix.WaitIdle(ctx); err != nil {
		e.t.Fatalf("indexer never idle: %v", err)
	}
}

// path returns the absolute path of rel.
func (e *env) path(rel string) string { return filepath.Join(e.root, rel) }

// write writes rel with an mtime an hour ago, so its record is never
// racily clean.
func (e *env) write(rel, content string) {
	e.t.Helper()
	p := e.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		e.t.Fatal(err)
	}
}

// tree writes n files of a few KiB under root.
func writeFiles(t testing.TB, root string, n int) []string {
	t.Helper()
	var out []string
	for i := range n {
		p := filepath.Join(root, fmt.Sprintf("d%d", i%5), fmt.Sprintf("f%03d.dat", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1000+37*i)
		for j := range b {
			b[j] = byte(i*7 + j)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// record returns the stored record of p.
func (e *env) record(p string) store.Record {
	e.t.Helper()
	r, ok, err := e.st.Get([]byte(p))
	if err != nil || !ok {
		e.t.Fatalf("no record of %s: %v", p, err)
	}
	return r
}

// rot replaces p's record's digest by another's, keeping everything else:
// to the audit this looks exactly like the file's bytes having changed
// behind the file system's back.
func (e *env) rot(p string) store.Record {
	e.t.Helper()
	r := e.record(p)
	bad := r
	bad.Digest = append([]byte{}, r.Digest...)
	bad.Digest[0] ^= 0xff
	if err := e.st.Put(context.Background(), []byte(p), bad); err != nil {
		e.t.Fatal(err)
	}
	return bad
}

// run starts a run by hand and waits for it to end.
func (e *env) run(o StartOptions) RunSummary {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := e.a.Start(ctx, o)
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := e.a.WaitRun(ctx, id)
	if err != nil {
		e.t.Fatalf("run %d: %v\nlog:\n%s", id, err, e.log)
	}
	return s
}

// problems lists the auditor's problems by path.
func (e *env) problems() map[string]Problem {
	e.t.Helper()
	out := map[string]Problem{}
	if err := e.a.Problems(context.Background(), func(p Problem) error {
		out[string(p.Path)] = p
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// keyOf is the key of content stored at p.
func keyOf(t testing.TB, p string, content []byte) string {
	t.Helper()
	k, err := key.FromDigest(key.SHA256E, digestOf(string(content)), int64(len(content)), filepath.Base(p), key.ExtRule{})
	if err != nil {
		t.Fatal(err)
	}
	return k.String()
}

// busyIndexer is the real indexer, except that it says path is busy while
// hold is set.
type busyIndexer struct {
	Indexer
	path string
	hold atomic.Bool
}

func (b *busyIndexer) Busy(p string) bool { return (b.hold.Load() && p == b.path) || b.Indexer.Busy(p) }

// syncOnly is a watcher's set-up that is over: every directory watched,
// every event read, and the ledger synced by calling it.
type syncOnly func(ctx context.Context) error

func (syncOnly) WaitWatched(context.Context, string) error { return nil }
func (syncOnly) CatchingUp() bool                          { return false }
func (s syncOnly) Sync(ctx context.Context) error          { return s(ctx) }
