package store

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
)

// openTest opens a fresh index in a temp dir with its writer running. At
// cleanup the writer is stopped, the index checked (bbolt and invariants),
// and closed.
func openTest(t testing.TB) *Store {
	t.Helper()
	return openTestAt(t, filepath.Join(t.TempDir(), "index.db"), Options{MaxDelay: 2e6, NoSync: true})
}

func openTestAt(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	stop := runWriter(t, s)
	t.Cleanup(func() {
		stop()
		mustCheck(t, s)
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// runWriter starts s.Run and returns a function that stops it.
func runWriter(t testing.TB, s *Store) func() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }
}

func mustCheck(t testing.TB, s *Store) {
	t.Helper()
	rep, err := s.Check()
	if err != nil {
		t.Errorf("Check: %v", err)
		return
	}
	for _, p := range rep.Problems {
		t.Errorf("invariant: %s", p)
	}
}

// rec makes an ok SHA256E record for content seed.
func rec(content string, size int64, dev, ino uint64) Record {
	d := sha256.Sum256([]byte(content))
	return Record{Backend: key.SHA256E, Digest: d[:], Size: size, MtimeNs: 1_700_000_000_000_000_000,
		CtimeNs: 1_700_000_000_500_000_000, Dev: dev, Ino: ino, HashedAt: 1_700_000_100_000_000_000}
}

func p(format string, args ...any) []byte { return []byte(fmt.Sprintf(format, args...)) }

func mustPut(t testing.TB, s *Store, path string, r Record) {
	t.Helper()
	if err := s.Put(context.Background(), []byte(path), r); err != nil {
		t.Fatalf("Put %s: %v", path, err)
	}
}

func paths(ps [][]byte) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}

// editRaw changes the closed index at path with bbolt alone, behind the
// store's back, as damage or an older annexd would.
func editRaw(t testing.TB, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(fn)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}
