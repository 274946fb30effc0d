package apiserver

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/annexd/annexd/api"
)

// hubHandlers answer /v1/hub/...; without a hub part, 404. A hub
// whereis reads its query as the index's whereis does (idx).
type hubHandlers struct {
	common
	idx *indexHandlers
}

// hubber returns the hub part, or answers 404 without one.
func (hs *hubHandlers) hubber(w http.ResponseWriter) (api.Hubber, bool) {
	h := hs.part().Hub
	if h == nil {
		writeError(w, http.StatusNotFound, api.CodeNoHub, api.ErrNoHub.Error()+": "+noHub)
	}
	return h, h != nil
}

// hubError reports a failed hub query before a stream started.
func (hs *hubHandlers) hubError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, api.ErrNoHub):
		writeError(w, http.StatusNotFound, api.CodeNoHub, err.Error())
	case errors.Is(err, api.ErrHubUnreachable):
		writeError(w, http.StatusServiceUnavailable, api.CodeHubUnreachable, err.Error())
	case errors.Is(err, api.ErrBadRequest), errors.Is(err, api.ErrOutsideRoots), errors.Is(err, api.ErrNotFound):
		writeErr(w, err)
	default:
		hs.indexError(w, r, err)
	}
}

// hubCode is the code of an error in a stream's end line.
func hubCode(err error) string {
	switch {
	case errors.Is(err, api.ErrNoHub):
		return api.CodeNoHub
	case errors.Is(err, api.ErrHubUnreachable):
		return api.CodeHubUnreachable
	case errors.Is(err, api.ErrBadRequest):
		return api.CodeBadRequest
	}
	return api.CodeInternal
}

// whereis answers GET /v1/hub/whereis?key=K | digest=HEX
// [&backend=B] | path=P with one HubContent: the hosts that hold it. Any
// backend is asked: other hosts may hash with another than this one.
func (hs *hubHandlers) whereis(w http.ResponseWriter, r *http.Request) {
	h, ok := hs.hubber(w)
	if !ok {
		return
	}
	q, size, err := hs.idx.whereisQuery(r)
	if err != nil {
		hs.hubError(w, r, err)
		return
	}
	c, err := h.HubWhereis(r.Context(), api.HubWhereisQuery{WhereisQuery: q, Size: size})
	if err != nil {
		hs.hubError(w, r, err)
		return
	}
	if size >= 0 && c.Size != size {
		c.Holders = nil // the same digest with another size is not this key's content
	}
	writeJSON(w, http.StatusOK, c)
}

// dups answers GET /v1/hub/dups?min_size=N&limit=N&after=C with
// NDJSON HubContents held by two hosts or more, largest first.
func (hs *hubHandlers) dups(w http.ResponseWriter, r *http.Request) {
	h, ok := hs.hubber(w)
	if !ok {
		return
	}
	v := r.URL.Query()
	min, err := intParam(v, "min_size")
	if err != nil {
		writeErr(w, err)
		return
	}
	limit, after, err := pageParams(v)
	if err != nil {
		writeErr(w, err)
		return
	}
	hs.streamPages(w, r, limit, after, func(after []byte, n int) (api.HubPage, error) {
		return h.HubDups(r.Context(), api.HubDupsQuery{MinSize: min, After: after, Limit: n})
	})
}

// copies answers GET /v1/hub/copies?fewer_than=N[&path=P |
// &all_hosts=1]&limit=N&after=C with NDJSON HubContents held by fewer
// than N fresh hosts: this host's files (under P), or all the hub knows.
func (hs *hubHandlers) copies(w http.ResponseWriter, r *http.Request) {
	h, ok := hs.hubber(w)
	if !ok {
		return
	}
	q, err := hs.copiesQuery(r.URL.Query())
	if err != nil {
		writeErr(w, err)
		return
	}
	limit, after, err := pageParams(r.URL.Query())
	if err != nil {
		writeErr(w, err)
		return
	}
	hs.streamPages(w, r, limit, after, func(after []byte, n int) (api.HubPage, error) {
		q.After, q.Limit = after, n
		return h.HubCopies(r.Context(), q)
	})
}

func (hs *hubHandlers) copiesQuery(v url.Values) (api.HubCopiesQuery, error) {
	var q api.HubCopiesQuery
	n, err := strconv.Atoi(v.Get("fewer_than"))
	if err != nil || n < 1 {
		return q, fmt.Errorf("%w: fewer_than must be a count ≥ 1", api.ErrBadRequest)
	}
	q.FewerThan = n
	if q.AllHosts, err = boolParam(v, "all_hosts"); err != nil {
		return q, err
	}
	if !v.Has("path") && !v.Has("path_b64") {
		return q, nil
	}
	if q.AllHosts {
		return q, fmt.Errorf("%w: all_hosts covers every host's files; give no path with it", api.ErrBadRequest)
	}
	p, err := pathFromQuery(v)
	if err != nil {
		return q, err
	}
	q.Path, err = underRoots(p, hs.roots())
	return q, err
}

// hosts answers GET /v1/hub/hosts with the hosts the hub knows.
func (hs *hubHandlers) hosts(w http.ResponseWriter, r *http.Request) {
	h, ok := hs.hubber(w)
	if !ok {
		return
	}
	hosts, err := h.HubHosts(r.Context())
	if err != nil {
		hs.hubError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.HubHosts{Hosts: hosts})
}

func pageParams(v url.Values) (int, []byte, error) {
	limit, err := intParam(v, "limit")
	if err != nil {
		return 0, nil, err
	}
	var after []byte
	if a := v.Get("after"); a != "" {
		if after, err = base64.RawURLEncoding.DecodeString(a); err != nil {
			return 0, nil, fmt.Errorf("%w: after: not a cursor from this API", api.ErrBadRequest)
		}
	}
	return int(min(limit, 1<<30)), after, nil
}

// streamPages asks page for pages until limit items were sent (0: all)
// and streams them. The first page's failure is a status; a later one
// ends the stream with its error.
func (hs *hubHandlers) streamPages(w http.ResponseWriter, r *http.Request, limit int, after []byte,
	page func(after []byte, n int) (api.HubPage, error)) {
	left := func(sent int64) int {
		if limit == 0 {
			return 0
		}
		return limit - int(sent)
	}
	p, err := page(after, limit)
	if err != nil {
		hs.hubError(w, r, err)
		return
	}
	st := newStream(w)
	for {
		for _, c := range p.Items {
			if err := st.item(appendJSON(c)); err != nil {
				return // the client went away
			}
		}
		if p.Next == nil || (limit > 0 && st.count >= int64(limit)) {
			next := ""
			if p.Next != nil {
				next = base64.RawURLEncoding.EncodeToString(p.Next)
			}
			st.end(api.StreamEnd{Next: next})
			return
		}
		if p, err = page(p.Next, left(st.count)); err != nil {
			st.end(api.StreamEnd{Error: err.Error(), Code: hubCode(err)})
			return
		}
	}
}

// appendJSON adapts a json.Marshaler to stream.item.
func appendJSON(c api.HubContent) func([]byte) []byte {
	return func(buf []byte) []byte {
		b, err := c.MarshalJSON()
		if err != nil {
			return append(buf, `{"error":"encode"}`...)
		}
		return append(buf, b...)
	}
}
