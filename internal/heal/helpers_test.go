package heal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/audit"
	"github.com/annexd/annexd/internal/indexer"
	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/internal/testutil"
	"github.com/annexd/annexd/store"
)

// env is a real index of a tree on a loop-mounted file system, kept by a
// real indexer, audited by a real auditor, healed by a Healer.
type env struct {
	t     testing.TB
	fs    *loopfs.FS
	root  string
	index string
	st    *store.Store
	h     *hasher.Hasher
	ix    *indexer.Indexer
	a     *audit.Auditor
	heal  *Healer
	log   *testutil.Buffer
	stop  func()
}

// newEnv mounts a file system of kind (mkfs extra args) and makes the
// tree's folder; start indexes it.
func newEnv(t testing.TB, kind loopfs.Kind, mkfs ...string) *env {
	t.Helper()
	size := loopfs.MinSize[kind]
	if size < 64<<20 {
		size = 64 << 20
	}
	opts := loopfs.Options{Size: size}
	if len(mkfs) > 0 {
		opts.MkfsArgs = mkfs
	}
	l := loopfs.New(t, kind, opts)
	e := &env{t: t, fs: l, root: filepath.Join(l.Dir, "tree"), index: filepath.Join(t.TempDir(), "index.db"), log: &testutil.Buffer{}}
	if err := os.Mkdir(e.root, 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

// start opens the index and runs the indexer (a rescan of the tree) and
// the auditor, and builds the Healer with o.
func (e *env) start(o Options) {
	t := e.t
	st, err := store.Open(e.index, store.Options{NoSync: true, MaxDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.st = st
	e.h = hasher.New(hasher.DefaultPolicy(), nil)
	logger := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ix, err := indexer.New(st, e.h, indexer.Options{Roots: []string{e.root}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	e.ix = ix
	a, err := audit.New(st, e.h, audit.Options{Config: audit.Config{MaxRate: -1, MaxLoad: -1, IgnoreBattery: true, Jitter: -1, Disabled: true},
		Indexer: ix, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	e.a = a
	o.Logger = logger
	e.heal = New(st, a, e.h, o)
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
			e.h.Close()
			if err := st.Close(); err != nil {
				t.Errorf("store close: %v", err)
			}
		})
	}
	t.Cleanup(e.stop)
}

func (e *env) settle() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.ix.WaitIdle(ctx); err != nil {
		e.t.Fatalf("indexer never idle: %v", err)
	}
}

func (e *env) path(rel string) string { return filepath.Join(e.root, rel) }

// write writes rel with data, mode 0640 and an mtime an hour ago.
func (e *env) write(rel string, data []byte) string {
	e.t.Helper()
	p := e.path(rel)
	if err := os.WriteFile(p, data, 0o640); err != nil {
		e.t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(p, old, old); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// content returns n random bytes.
func content(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// rot flips a byte of each path on the device, then audits the tree:
// each must be found corrupt.
func (e *env) rot(paths ...string) {
	e.t.Helper()
	e.fs.Sync(e.t)
	for _, p := range paths {
		e.fs.FlipByte(e.t, p, 100)
	}
	e.audit()
	probs := e.problems()
	for _, p := range paths {
		if pr, ok := probs[p]; !ok || pr.Class != audit.Corrupt {
			e.t.Fatalf("%s not found corrupt: %+v\nlog:\n%s", p, probs, e.log)
		}
	}
}

// audit runs an audit of the tree and waits for it.
func (e *env) audit() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := e.a.Start(ctx, audit.StartOptions{FullSpeed: true})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.a.WaitRun(ctx, id); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) problems() map[string]audit.Problem {
	e.t.Helper()
	out := map[string]audit.Problem{}
	if err := e.a.Problems(context.Background(), func(p audit.Problem) error {
		out[string(p.Path)] = p
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// healAll heals every finding and returns the outcomes by path.
func (e *env) healAll(dry bool) map[string]File {
	e.t.Helper()
	fs, err := e.heal.Heal(context.Background(), nil, dry)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]File{}
	for _, f := range fs {
		out[string(f.Path)] = f
	}
	return out
}

// mustHold fails unless the file at p holds want.
func mustHold(t testing.TB, p string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s does not hold the expected bytes", p)
	}
}

// temps lists the heal's temporary files left in dir (not the rotten
// bytes kept aside).
func temps(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, en := range ents {
		if strings.HasPrefix(en.Name(), TempPrefix) && !strings.HasSuffix(en.Name(), AsideSuffix) {
			out = append(out, en.Name())
		}
	}
	return out
}

// aclXattr is a POSIX access ACL (system.posix_acl_access) granting
// uid 4321 read access besides the owner's, group's and others' bits.
func aclXattr() []byte {
	var b bytes.Buffer
	w := func(v ...any) {
		for _, x := range v {
			_ = binary.Write(&b, binary.LittleEndian, x)
		}
	}
	w(uint32(2))
	w(uint16(0x01), uint16(6), uint32(0xffffffff)) // user::rw-
	w(uint16(0x02), uint16(4), uint32(4321))       // user:4321:r--
	w(uint16(0x04), uint16(4), uint32(0xffffffff)) // group::r--
	w(uint16(0x10), uint16(4), uint32(0xffffffff)) // mask::r--
	w(uint16(0x20), uint16(0), uint32(0xffffffff)) // other::---
	return b.Bytes()
}
