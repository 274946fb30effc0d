package dirdups

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// openStore opens a fresh index with its writer running; at cleanup the
// writer stops and the index is checked and closed.
func openStore(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "index.db"), store.Options{MaxDelay: 2 * time.Millisecond, NoSync: true})
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

// tree is an index described in lines "PATH CONTENT SIZE [INO]": CONTENT
// "-" is a pending file; without INO each file is its own inode.
func tree(t testing.TB, st *store.Store, lines string) {
	t.Helper()
	var cs []store.Change
	for i, l := range strings.Split(strings.TrimSpace(lines), "\n") {
		var path, content string
		var size int64
		ino := uint64(1000 + i)
		if n, _ := fmt.Sscan(l, &path, &content, &size, &ino); n < 3 {
			t.Fatalf("bad tree line %q", l)
		}
		cs = append(cs, store.Change{Op: store.OpPut, Path: []byte(path), Record: record(content, size, ino)})
	}
	if err := st.SubmitAll(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
}

// record is an ok record of content on device 1, pending for "-".
func record(content string, size int64, ino uint64) store.Record {
	r := store.Record{Size: size, MtimeNs: 1_700_000_000_000_000_000, CtimeNs: 1_700_000_000_000_000_000, Dev: 1, Ino: ino}
	if content == "-" {
		r.State = store.StatePending
		return r
	}
	d := sha256.Sum256([]byte(content))
	r.Backend, r.Digest, r.HashedAt = key.SHA256E, d[:], r.MtimeNs+1
	return r
}

// find runs Find over st and describes what it reports, one line each:
// "identical /a /b 300 (unsurveyed 2)", "contained /d in /a 100",
// "unknown /p 1".
func find(t testing.TB, st *store.Store, opts Options) []string {
	t.Helper()
	res, err := Find(context.Background(), StoreSource{st}, opts)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range res.Reports {
		var ps []string
		for _, f := range r.Folders {
			ps = append(ps, string(f.Path))
		}
		line := "identical " + strings.Join(ps, " ")
		if r.Kind == Contained {
			line = "contained " + ps[1] + " in " + ps[0]
		}
		line += fmt.Sprint(" ", r.Reclaimable)
		if r.Unsurveyed > 0 {
			line += fmt.Sprintf(" (unsurveyed %d)", r.Unsurveyed)
		}
		out = append(out, line)
	}
	for _, u := range res.Unknown {
		out = append(out, fmt.Sprintf("unknown %s %d", u.Path, u.Files))
	}
	return out
}

func same(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
