package dedup

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// openStore opens a fresh index with its writer running. At cleanup the
// writer stops and the index is checked and closed.
func openStore(t testing.TB) *store.Store {
	t.Helper()
	return openStoreWith(t, store.Options{MaxDelay: 2 * time.Millisecond})
}

// openStoreWith is openStore with the index's options.
func openStoreWith(t testing.TB, opt store.Options) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "index.db"), opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := st.Run(ctx); err != nil {
			t.Errorf("store Run: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		rep, err := st.Check()
		if err != nil || !rep.OK() {
			t.Errorf("index check: %v %v", err, rep.Problems)
		}
		st.Close()
	})
	return st
}

// record hashes path with the real hasher and stores its record, as the
// indexer does.
func record(t testing.TB, st *store.Store, path string) store.Record {
	t.Helper()
	start := time.Now().UnixNano()
	res, err := hasher.HashFile(context.Background(), path, key.SHA256E)
	if err != nil {
		t.Fatalf("hash %s: %v", path, err)
	}
	r := recordOf(res.Info, res.Digest, start)
	if err := st.Put(context.Background(), []byte(path), r); err != nil {
		t.Fatalf("put %s: %v", path, err)
	}
	return r
}

func recordOf(fi fsstat.FileInfo, digest []byte, hashedAt int64) store.Record {
	return store.Record{Backend: key.SHA256E, Digest: digest, Size: fi.Size, MtimeNs: fi.MtimeNs,
		CtimeNs: fi.CtimeNs, Dev: fi.Dev, Ino: fi.Ino, HashedAt: hashedAt, VerifiedAt: hashedAt, State: store.StateOK}
}

// content returns n bytes that depend on seed. It is left out of the race
// detector: it touches no shared memory, and instrumented it cost a second
// of CPU for each 16 MiB, tens of seconds over the suite.
//
//go:norace
func content(seed byte, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func lstat(t testing.TB, path string) fsstat.FileInfo {
	t.Helper()
	fi, err := fsstat.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// assertContent fails unless path holds want.
func assertContent(t testing.TB, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("read %s: %v", path, err)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: content changed (%d bytes, want %d)", path, len(got), len(want))
	}
}

// extentsOf returns the extent map of path.
func extentsOf(t testing.TB, path string) []extent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	x, err := fiemap(int(f.Fd()), fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// sharesAll reports whether every placed byte of target is keeper's.
func sharesAll(t testing.TB, target, keeper string) bool {
	t.Helper()
	tx := extentsOf(t, target)
	same, _ := sharing(tx, extentsOf(t, keeper))
	return placed(tx) > 0 && same == placed(tx)
}

// rehashLog collects the paths a Deduper asked to hash again.
type rehashLog struct {
	mu    sync.Mutex
	paths []string
}

// Rehash makes a rehashLog the Deduper's Indexer.
func (l *rehashLog) Rehash(p string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paths = append(l.paths, p)
}

// rehashFunc is an Indexer that calls itself.
type rehashFunc func(path string)

func (f rehashFunc) Rehash(path string) { f(path) }

func (l *rehashLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.paths...)
}

// run plans and applies a request, failing the test on a plan error.
func runDedup(t testing.TB, d *Deduper, req Request) (Plan, Result, error) {
	t.Helper()
	p, err := d.Plan(context.Background(), req)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	res, err := d.Apply(context.Background(), p, req)
	return p, res, err
}
