package apiserver

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/annexd/annexd/api"
)

// A root given through a symlink: the index holds the resolved spelling,
// and a path under the symlink is looked up there and answered under the
// spelling asked, by every endpoint that takes a path. Forget takes its
// path as stored and is not refused under the alias.
func TestRootAlias(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := writeFile(t, root, "d/a.txt", "through a link")
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	idx := &forgetIndex{storeIndex: newStoreIndex(t, root)}
	ts := startServer(t, Config{Parts: Parts{Index: idx}, RootAliases: map[string]string{link: root}}, nil)
	c, ctx := ts.client, context.Background()
	via := filepath.Join(link, "d/a.txt")
	want := wantKey("through a link", ".txt")

	r, err := c.Lookup(ctx, []byte(via), true)
	if err != nil || r.State != api.StateCurrent || r.Key.String() != want || string(r.Path) != via {
		t.Fatalf("lookup under the link: %+v, %v; want current %s for %s", r, err, want, via)
	}
	if _, ok, _ := idx.st.Get([]byte(f)); !ok {
		t.Errorf("no record under the resolved spelling %s", f)
	}
	if _, ok, _ := idx.st.Get([]byte(via)); ok {
		t.Errorf("a record under the link's spelling %s", via)
	}
	var got []api.LookupResult
	err = c.LookupBatch(ctx, [][]byte{[]byte(via), []byte(f)}, false, func(r api.LookupResult) error {
		got = append(got, r)
		return nil
	})
	if err != nil || len(got) != 2 || string(got[0].Path) != via || string(got[1].Path) != f ||
		got[0].State != api.StateCurrent || got[1].State != api.StateCurrent {
		t.Errorf("batch by both spellings: %+v, %v", got, err)
	}
	var locs []api.Location
	err = c.WhereisPath(ctx, []byte(via), false, func(l api.Location) error {
		locs = append(locs, l)
		return nil
	})
	if err != nil || len(locs) != 1 || !bytes.Equal(locs[0].Path, []byte(f)) {
		t.Errorf("whereis under the link: %+v, %v; want the stored %s", locs, err, f)
	}
	if _, err := c.Lookup(ctx, []byte(link+"x/a"), false); !errors.Is(err, api.ErrOutsideRoots) {
		t.Errorf("a sibling of the link: %v, want outside the roots", err)
	}
	if _, err := c.Forget(ctx, []byte(link), true); err != nil {
		t.Errorf("forget of the link's spelling (records stored there are outside the roots): %v", err)
	}
	if _, err := c.Forget(ctx, []byte(root), true); !errors.Is(err, api.ErrUnderRoot) {
		t.Errorf("forget of the root: %v, want refused", err)
	}
}
