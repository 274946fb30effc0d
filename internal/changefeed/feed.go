package changefeed

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// Index is what the feed reads: the store's feed.
type Index interface {
	Feed() (store.FeedState, error)
	FeedAfter(id store.IndexID, after uint64, max int) ([]store.FeedEntry, store.FeedState, error)
	FeedWait(ctx context.Context, after uint64) error
}

// Feed answers api.ChangeFeed from an Index.
type Feed struct {
	ix Index
}

// New returns the feed of ix.
func New(ix Index) *Feed { return &Feed{ix: ix} }

// Changes returns the changes after q.Since; with q.Wait, it waits that
// long for one when there is none yet. Without q.Since, only the
// current cursor.
func (f *Feed) Changes(ctx context.Context, q api.ChangesQuery) (api.ChangesPage, error) {
	if !q.Since.Set {
		st, err := f.ix.Feed()
		return api.ChangesPage{Cursor: cursor(st.IndexID, st.Seq), Changes: []api.Change{}}, err
	}
	id, err := indexID(q.Since)
	if err != nil {
		return api.ChangesPage{}, err
	}
	page, err := f.page(id, q)
	if err != nil || len(page.Changes) > 0 || q.Wait <= 0 {
		return page, err
	}
	wctx, cancel := context.WithTimeout(ctx, q.Wait)
	defer cancel()
	if err := f.ix.FeedWait(wctx, q.Since.Seq); err != nil && wctx.Err() == nil {
		return page, err
	}
	return f.page(id, q)
}

// page reads one page after q.Since.
func (f *Feed) page(id store.IndexID, q api.ChangesQuery) (api.ChangesPage, error) {
	es, st, err := f.ix.FeedAfter(id, q.Since.Seq, q.Limit+1)
	if errors.Is(err, store.ErrResync) {
		why := strings.TrimPrefix(err.Error(), store.ErrResync.Error()+": ")
		return api.ChangesPage{}, fmt.Errorf("%w: %s; the feed is now at %s", api.ErrResync,
			why, cursor(st.IndexID, st.Seq))
	}
	if err != nil {
		return api.ChangesPage{}, err
	}
	page := api.ChangesPage{Cursor: cursor(st.IndexID, q.Since.Seq), Changes: make([]api.Change, 0, len(es))}
	if len(es) > q.Limit {
		es, page.More = es[:q.Limit], true
	}
	for i := range es {
		c := change(st.IndexID, &es[i])
		page.Changes = append(page.Changes, c)
		page.Cursor = c.Cursor
	}
	return page, nil
}

// indexID is the id a cursor names, zero when it names none.
func indexID(c api.Cursor) (store.IndexID, error) {
	if c.IndexID == "" {
		return store.IndexID{}, nil
	}
	id, err := store.ParseIndexID(c.IndexID)
	if err != nil {
		return id, fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	return id, nil
}

func cursor(id store.IndexID, seq uint64) string {
	return api.Cursor{IndexID: id.String(), Seq: seq, Set: true}.String()
}

// change turns an entry into the API's change.
func change(id store.IndexID, e *store.FeedEntry) api.Change {
	c := api.Change{Seq: e.Seq, Cursor: cursor(id, e.Seq), Kind: e.Kind.String(), Finding: e.Finding,
		Time: time.Unix(0, e.Time).UTC()}
	c.SetPaths(e.Path, e.From)
	from := e.Path
	if e.From != nil {
		from = e.From
	}
	c.OldKey, c.NewKey = keyText(e.Old, from), keyText(e.New, e.Path)
	return c
}

// keyText is the git-annex key of k for a file named like path, "" for
// no content.
func keyText(k store.ContentKey, path []byte) string {
	if k.IsZero() {
		return ""
	}
	ak, err := key.FromDigest(k.Backend, k.Digest, k.Size, filepath.Base(string(path)), key.ExtRule{})
	if err != nil {
		return ""
	}
	return ak.String()
}
