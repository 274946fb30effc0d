package changefeed

import (
	"context"
	"crypto/sha256"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "index.db"), store.Options{NoSync: true, Feed: store.FeedOptions{Keep: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		st.Close()
	})
	return st
}

func put(t *testing.T, st *store.Store, path, content string, ino uint64) {
	t.Helper()
	d := sha256.Sum256([]byte(content))
	r := store.Record{Backend: key.SHA256E, Digest: d[:], Size: int64(len(content)), Dev: 1, Ino: ino, HashedAt: 1}
	if err := st.Put(context.Background(), []byte(path), r); err != nil {
		t.Fatal(err)
	}
}

// TestFeedPages: a move's old key takes the old name's extension, pages
// end at Limit with More, a wait with no change returns an empty page
// with the cursor asked, and a trimmed cursor's resync names where the
// feed is now.
func TestFeedPages(t *testing.T) {
	st := openStore(t)
	f := New(st)
	ctx := context.Background()
	now, err := f.Changes(ctx, api.ChangesQuery{})
	if err != nil {
		t.Fatal(err)
	}
	start, _ := api.ParseCursor(now.Cursor)
	put(t, st, "/r/a.jpg", "a", 1)
	if _, err := st.Move(ctx, []byte("/r/a.jpg"), []byte("/r/a.png")); err != nil {
		t.Fatal(err)
	}
	p, err := f.Changes(ctx, api.ChangesQuery{Since: start, Limit: 1})
	if err != nil || len(p.Changes) != 1 || !p.More || p.Cursor != p.Changes[0].Cursor {
		t.Fatalf("first page %+v, %v", p, err)
	}
	next, _ := api.ParseCursor(p.Cursor)
	p, err = f.Changes(ctx, api.ChangesQuery{Since: next, Limit: 5})
	if err != nil || len(p.Changes) != 1 || p.More {
		t.Fatalf("second page %+v, %v", p, err)
	}
	m := p.Changes[0]
	if m.Kind != api.ChangeMove || !strings.HasSuffix(m.OldKey, ".jpg") || !strings.HasSuffix(m.NewKey, ".png") {
		t.Fatalf("move %+v", m)
	}
	last, _ := api.ParseCursor(p.Cursor)
	t0 := time.Now()
	p, err = f.Changes(ctx, api.ChangesQuery{Since: last, Wait: 100 * time.Millisecond, Limit: 5})
	if err != nil || len(p.Changes) != 0 || p.Cursor != last.String() || time.Since(t0) < 100*time.Millisecond {
		t.Fatalf("a wait with no change: %+v, %v after %v", p, err, time.Since(t0))
	}
	put(t, st, "/r/b", "b", 2)
	put(t, st, "/r/c", "c", 3)
	_, err = f.Changes(ctx, api.ChangesQuery{Since: start, Limit: 5})
	if !errors.Is(err, api.ErrResync) || !strings.Contains(err.Error(), "now at "+start.IndexID+":4") {
		t.Fatalf("a trimmed cursor: %v", err)
	}
}
