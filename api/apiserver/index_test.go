package apiserver

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// storeIndex serves a real store through the Index interface for the
// server tests: the freshness rule (fresh lstat against the record, hash on
// demand with wait) in its simplest form. The daemon's implementation adds
// queues, ignore patterns and the watcher.
type storeIndex struct {
	st       *store.Store
	roots    []string
	backend  key.Backend
	idle     atomic.Bool
	lookups  atomic.Int64
	statuses atomic.Int64 // calls of Status
}

// newStoreIndex opens a store in a temporary directory, runs its writer
// for the test's lifetime and serves roots.
func newStoreIndex(t testing.TB, roots ...string) *storeIndex {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "index.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("store run: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("store close: %v", err)
		}
	})
	x := &storeIndex{st: st, roots: roots, backend: key.SHA256E}
	x.idle.Store(true)
	return x
}

func (x *storeIndex) Roots() []string { return x.roots }

func (x *storeIndex) Backend() key.Backend { return x.backend }

// Sync returns at once: the tests make their changes before they ask.
func (x *storeIndex) Sync(context.Context) error { return nil }

// WaitIdle returns at once: the server then asks Status again.
func (x *storeIndex) WaitIdle(context.Context) error { return nil }

// Forget drops the subtree from the real store (the daemon also keeps the
// roots a directory holds).
func (x *storeIndex) Forget(ctx context.Context, dir []byte, dry bool) (api.ForgetResult, error) {
	var n int64
	if err := x.st.Subtree(ctx, dir, func([]byte, store.Record) error { n++; return nil }); err != nil {
		return api.ForgetResult{}, err
	}
	if !dry {
		if err := x.st.DeleteSubtree(ctx, dir); err != nil {
			return api.ForgetResult{}, err
		}
	}
	return api.ForgetResult{DryRun: dry, Files: n}, nil
}

func (x *storeIndex) Lookup(ctx context.Context, p []byte, wait bool) (api.LookupResult, error) {
	x.lookups.Add(1)
	fi, err := fsstat.Lstat(string(p))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return api.LookupResult{Path: p, State: api.StateMissing}, nil
	case err != nil:
		return api.LookupResult{Path: p, State: api.StateUnreadable, Message: err.Error()}, nil
	case !fi.IsRegular():
		return api.LookupResult{Path: p, State: api.StateNotRegular}, nil
	}
	rec, ok, err := x.st.Get(p)
	if err != nil {
		return api.LookupResult{}, err
	}
	if ok && rec.State == store.StateOK && sameStat(rec, fi) {
		k, err := key.FromDigest(rec.Backend, rec.Digest, rec.Size, string(p), key.ExtRule{})
		return api.LookupResult{Path: p, State: api.StateCurrent, Key: k, Size: rec.Size}, err
	}
	if !wait {
		return api.LookupResult{Path: p, State: api.StatePending, Size: fi.Size}, nil
	}
	rec, err = x.index(ctx, p)
	if err != nil {
		return api.LookupResult{Path: p, State: api.StateUnreadable, Message: err.Error()}, nil
	}
	k, err := key.FromDigest(rec.Backend, rec.Digest, rec.Size, string(p), key.ExtRule{})
	return api.LookupResult{Path: p, State: api.StateCurrent, Key: k, Size: rec.Size}, err
}

func sameStat(r store.Record, fi fsstat.FileInfo) bool {
	return fi.Same(fsstat.FileInfo{Dev: r.Dev, Ino: r.Ino, Size: r.Size, MtimeNs: r.MtimeNs, CtimeNs: r.CtimeNs})
}

// index hashes p and stores its record, durably.
func (x *storeIndex) index(ctx context.Context, p []byte) (store.Record, error) {
	res, err := hasher.HashFile(ctx, string(p), x.backend)
	if err != nil {
		return store.Record{}, err
	}
	fi := res.Info
	rec := store.Record{Backend: x.backend, Digest: res.Digest, Size: fi.Size, MtimeNs: fi.MtimeNs,
		CtimeNs: fi.CtimeNs, Dev: fi.Dev, Ino: fi.Ino, HashedAt: time.Now().UnixNano(), State: store.StateOK}
	return rec, x.st.Put(ctx, p, rec)
}

func (x *storeIndex) location(p []byte) (api.Location, bool, error) {
	rec, ok, err := x.st.Get(p)
	if err != nil || !ok {
		return api.Location{}, ok, err
	}
	k, err := key.FromDigest(rec.Backend, rec.Digest, rec.Size, string(p), key.ExtRule{})
	if err != nil {
		return api.Location{}, false, err
	}
	fi, err := fsstat.Lstat(string(p))
	stale := err != nil || !sameStat(rec, fi)
	return api.Location{Path: p, Key: k, Size: rec.Size, State: rec.State.String(), Stale: stale}, true, nil
}

func (x *storeIndex) Whereis(ctx context.Context, q api.WhereisQuery, fn func(api.Location) error) error {
	paths, err := x.st.ByDigest(q.Backend, q.Digest)
	if err != nil {
		return err
	}
	for _, p := range paths {
		l, ok, err := x.location(p)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	return nil
}

func (x *storeIndex) Dups(ctx context.Context, q api.DupQuery, fn func(api.DupGroup) error) error {
	opts := store.DupOptions{MinSize: q.MinSize, After: q.After, Limit: q.Limit}
	return x.st.Dups(ctx, opts, func(g store.Group) error {
		dg := api.DupGroup{Backend: g.Backend, Digest: g.Digest, Size: g.Size, Duplicate: g.Duplicate, Reclaimable: g.Duplicate, Cursor: g.Cursor}
		for _, m := range g.Members {
			k, err := key.FromDigest(m.Record.Backend, m.Record.Digest, m.Record.Size, string(m.Path), key.ExtRule{})
			if err != nil {
				return err
			}
			dg.Files = append(dg.Files, api.Location{Path: m.Path, Key: k, Size: m.Record.Size, State: m.Record.State.String()})
		}
		return fn(dg)
	})
}

func (x *storeIndex) Status(ctx context.Context) (api.Status, error) {
	x.statuses.Add(1)
	s, err := x.st.Stats()
	if err != nil {
		return api.Status{}, err
	}
	st := api.Status{Version: "test", PID: os.Getpid(), IndexPath: x.st.Path(), SchemaVersion: int(s.SchemaVer),
		Files: s.Files, Bytes: s.Bytes, Idle: x.idle.Load()}
	for _, r := range x.roots {
		st.Roots = append(st.Roots, api.RootStatus{Path: r, ScanDone: true, Watched: true})
	}
	st.Watcher.Healthy = true
	return st, nil
}
