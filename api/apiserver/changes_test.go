package apiserver

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/changefeed"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

func feedRecord(content string, ino uint64) store.Record {
	d := sha256.Sum256([]byte(content))
	return store.Record{Backend: key.SHA256E, Digest: d[:], Size: int64(len(content)), Dev: 1, Ino: ino,
		MtimeNs: 1, CtimeNs: 1, HashedAt: 1}
}

// TestChangesAPI: the cursor, a page of changes with their keys, a move,
// a long poll woken by a change, and 410 resync for another index's
// cursor or one beyond the feed.
func TestChangesAPI(t *testing.T) {
	idx := newStoreIndex(t, t.TempDir())
	ts := startServer(t, Config{Parts: Parts{Index: idx, Changes: changefeed.New(idx.st)}}, nil)
	ctx := context.Background()
	now, err := ts.client.Changes(ctx, api.ChangesQuery{})
	if err != nil {
		t.Fatal(err)
	}
	since, err := api.ParseCursor(now.Cursor)
	if err != nil || since.IndexID == "" {
		t.Fatalf("cursor %q: %v", now.Cursor, err)
	}
	if err := idx.st.Put(ctx, []byte("/r/a.txt"), feedRecord("a", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := idx.st.Move(ctx, []byte("/r/a.txt"), []byte("/r/b.txt")); err != nil {
		t.Fatal(err)
	}
	p, err := ts.client.Changes(ctx, api.ChangesQuery{Since: since})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Changes) != 2 || p.Changes[0].Kind != api.ChangeAdd || p.Changes[1].Kind != api.ChangeMove ||
		p.Changes[1].From != "/r/a.txt" || p.Changes[1].Path != "/r/b.txt" || p.Cursor != p.Changes[1].Cursor {
		t.Fatalf("page %+v", p)
	}
	if k := p.Changes[0].NewKey; k != "SHA256E-s1--ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb.txt" || p.Changes[0].OldKey != "" {
		t.Fatalf("add keys %q > %q", p.Changes[0].OldKey, k)
	}

	last, _ := api.ParseCursor(p.Cursor)
	woke := make(chan api.ChangesPage, 1)
	go func() {
		p, err := ts.client.Changes(ctx, api.ChangesQuery{Since: last, Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		woke <- p
	}()
	time.Sleep(100 * time.Millisecond)
	if err := idx.st.Put(ctx, []byte("/r/b.txt"), feedRecord("b", 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-woke:
		if len(p.Changes) != 1 || p.Changes[0].Kind != api.ChangeEdit {
			t.Fatalf("long poll: %+v", p)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the long poll did not wake on a change")
	}

	other := api.Cursor{IndexID: "00112233445566778899aabbccddeeff", Seq: 1, Set: true}
	beyond := api.Cursor{IndexID: since.IndexID, Seq: 99, Set: true}
	for _, c := range []api.Cursor{other, beyond} {
		_, err := ts.client.Changes(ctx, api.ChangesQuery{Since: c})
		var se *api.StatusError
		if !errors.Is(err, api.ErrResync) || !errors.As(err, &se) || se.Status != http.StatusGone {
			t.Fatalf("since %s: %v, want 410 resync", c, err)
		}
	}
}

// TestChangesNoFeed: a daemon without a feed answers 404.
func TestChangesNoFeed(t *testing.T) {
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, t.TempDir())}}, nil)
	if _, err := ts.client.Changes(context.Background(), api.ChangesQuery{}); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("%v, want 404", err)
	}
}
