package apiserver

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/annexd/annexd/api"
)

// Bounds of the change feed's answers: a long poll's wait (?wait=D) and
// the changes of one page (?limit=N).
const (
	maxWaitChanges = 5 * time.Minute
	defaultChanges = 1000
	maxChanges     = 10000
)

// changesHandlers answer the change feed.
type changesHandlers struct{ common }

// changes answers GET /v1/changes[?since=CURSOR&limit=N&wait=D]
// with one api.ChangesPage; without since, with the current cursor only.
// With wait, an answer with no changes waits for one that long; the
// server's shutdown ends the wait at once. A cursor no longer kept, or of
// another index, answers 410 with CodeResync.
func (h *changesHandlers) changes(w http.ResponseWriter, r *http.Request) {
	feed := h.part().Changes
	if feed == nil {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "api: this daemon keeps no change feed ([changes] disabled)")
		return
	}
	q, err := changesQuery(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	h.cancelOnClose(ctx, cancel)
	page, err := feed.Changes(ctx, q)
	switch {
	case errors.Is(err, api.ErrResync):
		writeError(w, http.StatusGone, api.CodeResync, err.Error())
	case err != nil:
		writeErr(w, err)
	default:
		writeJSON(w, http.StatusOK, page)
	}
}

// changesQuery reads the feed's query parameters.
func changesQuery(r *http.Request) (api.ChangesQuery, error) {
	v := r.URL.Query()
	q := api.ChangesQuery{Limit: defaultChanges}
	var err error
	if since := v.Get("since"); since != "" {
		if q.Since, err = api.ParseCursor(since); err != nil {
			return q, err
		}
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			return q, errBad("limit: want a count ≥ 1")
		}
		q.Limit = min(n, maxChanges)
	}
	if d := v.Get("wait"); d != "" {
		if q.Wait, err = time.ParseDuration(d); err != nil || q.Wait < 0 {
			return q, errBad("wait: want a duration such as 30s")
		}
		q.Wait = min(q.Wait, maxWaitChanges)
	}
	return q, nil
}

func errBad(msg string) error { return &badRequest{msg} }

type badRequest struct{ msg string }

func (e *badRequest) Error() string        { return "api: " + e.msg }
func (e *badRequest) Is(target error) bool { return target == api.ErrBadRequest }
