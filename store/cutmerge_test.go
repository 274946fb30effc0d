package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Deferred groups mixed with direct ones, merges cut short at a random
// transaction of either phase (inode entries, then digest entries), during
// Settle and during Close, reopens in between: every read matches the model.
func TestPropertyMergesCutShort(t *testing.T) {
	defer func() { mergeHook = func() error { return nil } }()
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "store-cut-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		opts := Options{NoSync: true, MaxIdle: 200e3, deferAt: rapid.IntRange(1, 4).Draw(rt, "deferAt"),
			mergeIdle: time.Hour, mergeTx: rapid.IntRange(1, 3).Draw(rt, "mergeTx")}
		path := filepath.Join(dir, "index.db")
		s, err := Open(path, opts)
		if err != nil {
			rt.Fatal(err)
		}
		stop := runWriter(t, s)
		defer func() {
			mergeHook = func() error { return nil }
			stop()
			mustCheckRapid(rt, s)
			s.Close()
		}()
		m := model{}
		rounds := rapid.IntRange(1, 10).Draw(rt, "rounds")
		for range rounds {
			applyRound(rt, s, m)
			switch rapid.IntRange(0, 3).Draw(rt, "after") {
			case 0: // a merge cut short after k transactions
				k := rapid.IntRange(1, 8).Draw(rt, "cutAfter")
				n := 0
				cut := errors.New("cut")
				mergeHook = func() error {
					if n++; n >= k {
						return cut
					}
					return nil
				}
				if err := s.Settle(context.Background()); err != nil && !errors.Is(err, cut) {
					rt.Fatalf("Settle: %v", err)
				}
				mergeHook = func() error { return nil }
			case 1: // reopen
				stop()
				// Close merges: cut it short too.
				k := rapid.IntRange(1, 8).Draw(rt, "closeCut")
				n := 0
				mergeHook = func() error {
					if n++; n >= k {
						return errors.New("cut")
					}
					return nil
				}
				if err := s.Close(); err != nil {
					rt.Fatalf("Close: %v", err)
				}
				mergeHook = func() error { return nil }
				if s, err = Open(path, opts); err != nil {
					rt.Fatal(err)
				}
				stop = runWriter(t, s)
			}
			compareNoGroups(rt, s, m)
		}
		compare(rt, s, m)
	})
}

// compareNoGroups is compare without the Dups part, which merges.
func compareNoGroups(rt *rapid.T, s *Store, m model) {
	for p, r := range m {
		g, ok, err := s.Get([]byte(p))
		if err != nil || !ok || !g.Equal(&r) {
			rt.Fatalf("Get(%q) = %+v %v %v, want %+v", p, g, ok, err, r)
		}
		all, _ := s.ByInodeAll(r.Dev, r.Ino)
		if want := m.paths(func(o Record) bool { return o.Dev == r.Dev && o.Ino == r.Ino }); !slices.Equal(sorted(paths(all)), want) {
			rt.Fatalf("ByInodeAll(%d,%d) = %q, want %q", r.Dev, r.Ino, paths(all), want)
		}
	}
	mustCheckRapid(rt, s)
}
