package apiserver

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/dirdups"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// storeDirDups answers /v1/dups/dirs from the real store, as the daemon
// does, without surveys.
type storeDirDups struct{ st *store.Store }

func (s storeDirDups) DirDups(ctx context.Context, q api.DirDupQuery, fn func(api.DirDup) error) error {
	res, err := dirdups.Find(ctx, dirdups.StoreSource{Store: s.st}, dirdups.Options{MinSize: q.MinSize, Paths: q.Paths})
	if err != nil {
		return err
	}
	for _, r := range res.Reports {
		d := api.DirDup{Kind: api.DirIdentical, Reclaimable: r.Reclaimable, Unsurveyed: r.Unsurveyed}
		for _, f := range r.Folders {
			d.Folders = append(d.Folders, api.DirFolder{Path: f.Path, Files: f.Files, Bytes: f.Bytes})
		}
		if err := fn(d); err != nil {
			return err
		}
	}
	return nil
}

// TestDirDups: GET and POST /v1/dups/dirs stream the finder's reports,
// a folder name that is not UTF-8 comes back whole, a POST path outside
// the roots is refused, and a server given no finder answers 404.
func TestDirDups(t *testing.T) {
	root := shortDir(t)
	idx := newStoreIndex(t, root)
	ts := startServer(t, Config{Parts: Parts{Index: idx, DirDups: storeDirDups{idx.st}}}, nil)
	ctx := context.Background()
	odd := root + "/caf\xe9"
	for i, p := range []string{odd + "/x", root + "/b/x", root + "/c/y"} {
		d := sha256.Sum256([]byte(p[len(p)-1:]))
		r := store.Record{Backend: key.SHA256E, Digest: d[:], Size: 10, Dev: 1, Ino: uint64(i + 1)}
		if err := idx.st.Put(ctx, []byte(p), r); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	list := func(q api.DirDupQuery) error {
		got = got[:0]
		return ts.client.DirDups(ctx, q, func(d api.DirDup) error {
			for _, f := range d.Folders {
				got = append(got, string(f.Path))
			}
			return nil
		})
	}
	if err := list(api.DirDupQuery{}); err != nil || strings.Join(got, "|") != root+"/b|"+odd {
		t.Errorf("GET: %q %v, want %s and %q", got, err, root+"/b", odd)
	}
	if err := list(api.DirDupQuery{Paths: [][]byte{[]byte(root + "/c")}}); err != nil || len(got) != 0 {
		t.Errorf("POST %s/c: %q %v, want nothing", root, got, err)
	}
	var se *api.StatusError
	if err := list(api.DirDupQuery{Paths: [][]byte{[]byte("/elsewhere")}}); !errors.As(err, &se) || se.Code != api.CodeOutsideRoots {
		t.Errorf("POST outside the roots: %v, want %s", err, api.CodeOutsideRoots)
	}
	plain := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	err := plain.client.DirDups(ctx, api.DirDupQuery{}, func(api.DirDup) error { return nil })
	if !errors.As(err, &se) || se.Status != http.StatusNotFound || se.Code != api.CodeNotSupported {
		t.Errorf("no finder: %v, want 404 %s", err, api.CodeNotSupported)
	}
}
