package apiserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// forgetIndex is storeIndex that keeps the directories it was asked to
// forget.
type forgetIndex struct {
	*storeIndex
	calls []string
}

func (x *forgetIndex) Forget(ctx context.Context, dir []byte, dry bool) (api.ForgetResult, error) {
	x.calls = append(x.calls, string(dir))
	return x.storeIndex.Forget(ctx, dir, dry)
}

func TestForget(t *testing.T) {
	root := shortDir(t)
	idx := &forgetIndex{storeIndex: newStoreIndex(t, root)}
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	ctx := context.Background()
	old := []byte("/old/caf\xe9") // not UTF-8: path_b64 both ways
	for i, p := range [][]byte{append(old, "/a"...), append(old, "/b/c"...)} {
		d := sha256.Sum256(p)
		r := store.Record{Backend: key.SHA256E, Digest: d[:], Size: 1, Dev: 1, Ino: uint64(i + 1)}
		if err := idx.st.Put(ctx, p, r); err != nil {
			t.Fatal(err)
		}
	}

	r, err := ts.client.Forget(ctx, old, true)
	if err != nil || r.Files != 2 || !r.DryRun || !bytes.Equal(r.Path, old) {
		t.Errorf("dry run: %+v %v", r, err)
	}
	r, err = ts.client.Forget(ctx, old, false)
	if err != nil || r.Files != 2 || r.DryRun || !bytes.Equal(r.Path, old) {
		t.Errorf("forget: %+v %v", r, err)
	}
	if st, _ := idx.st.Stats(); st.Files != 0 {
		t.Errorf("%d records left after forget", st.Files)
	}

	for _, c := range []struct {
		path string
		want error
		code string
	}{
		{root, api.ErrUnderRoot, api.CodeUnderRoot},
		{root + "/sub/dir", api.ErrUnderRoot, api.CodeUnderRoot},
		{"old", api.ErrBadRequest, api.CodeBadRequest},
		{"/old/../etc", api.ErrBadRequest, api.CodeBadRequest},
		{"/old/", api.ErrBadRequest, api.CodeBadRequest},
		{"", api.ErrBadRequest, api.CodeBadRequest},
	} {
		_, err := ts.client.Forget(ctx, []byte(c.path), false)
		var se *api.StatusError
		if !errors.Is(err, c.want) || !errors.As(err, &se) || se.Status != http.StatusBadRequest || se.Code != c.code {
			t.Errorf("forget %q: %v, want 400 %s", c.path, err, c.code)
		}
	}
	if _, err := ts.client.Forget(ctx, []byte(root), false); !strings.Contains(err.Error(), "next scan") {
		t.Errorf("refusal does not say why: %v", err)
	}
	if len(idx.calls) != 2 {
		t.Errorf("the index was asked to forget %q; refused requests must not reach it", idx.calls)
	}

}

// A location outside the roots carries the mark on the wire, through both
// of the client's decoders.
func TestLocationOutsideRootsJSON(t *testing.T) {
	l := api.Location{Path: []byte("/old/x"), Size: 3, State: "ok", OutsideRoots: true}
	b := l.AppendJSON(nil)
	if !bytes.Contains(b, []byte(`"outside_roots":true`)) {
		t.Fatalf("%s lacks outside_roots", b)
	}
	var back api.Location
	if err := back.UnmarshalJSON(b); err != nil || !back.OutsideRoots || string(back.Path) != "/old/x" {
		t.Errorf("round trip: %+v %v", back, err)
	}
	// With spacing the fast reader gives up; encoding/json must agree.
	spaced := bytes.ReplaceAll(b, []byte(`":`), []byte(`": `))
	back = api.Location{}
	if err := back.UnmarshalJSON(spaced); err != nil || !back.OutsideRoots {
		t.Errorf("round trip of %s: %+v %v", spaced, back, err)
	}
	if b := (api.Location{Path: []byte("/r/x")}).AppendJSON(nil); bytes.Contains(b, []byte("outside")) {
		t.Errorf("%s: outside_roots present though false", b)
	}
}
