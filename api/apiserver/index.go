package apiserver

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/key"
)

// indexHandlers answer the Index's endpoints: lookup, whereis, dups and
// forget.
type indexHandlers struct{ common }

const maxPathBytes = 4096 // PATH_MAX

// lookup answers GET /v1/lookup?path=P[&wait=1] with one LookupResult.
func (h *indexHandlers) lookup(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, err := pathFromQuery(q)
	if err != nil {
		writeErr(w, err)
		return
	}
	wait, err := boolParam(q, "wait")
	if err != nil {
		writeErr(w, err)
		return
	}
	stored, err := underRoots(p, h.roots())
	if err != nil {
		writeErr(w, err)
		return
	}
	res, err := h.index().Lookup(r.Context(), stored, wait)
	if err != nil {
		h.indexError(w, r, err)
		return
	}
	res.Path = p
	h.metrics.lookups.WithLabelValues(string(res.State)).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(res.AppendJSON(nil), '\n'))
}

// lookupBatch answers POST /v1/lookup: the body has one JSON object
// per line ({"path": …} or {"path_b64": …}); the answer has one
// LookupResult per line, in the same order, then the end line. A line that
// cannot be read gets StateInvalid; a path outside the roots gets
// StateOutsideRoots; neither stops the batch.
func (h *indexHandlers) lookupBatch(w http.ResponseWriter, r *http.Request) {
	wait, err := boolParam(r.URL.Query(), "wait")
	if err != nil {
		writeErr(w, err)
		return
	}
	// The whole body is read first (it is bounded) so that clients which
	// send everything before reading cannot deadlock against the answer.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBatchBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge,
				fmt.Sprintf("api: batch body larger than %d bytes; send fewer paths per request", MaxBatchBytes))
			return
		}
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "api: read body: "+err.Error())
		return
	}
	set := h.roots()
	st := newStream(w)
	for len(body) > 0 {
		var line []byte
		line, body, _ = bytes.Cut(body, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		res, err := h.lookupLine(r, line, set, wait)
		if err != nil && r.Context().Err() != nil {
			return // the client left; nobody reads the rest
		}
		if err != nil {
			h.log.Error("api lookup failed", "err", err)
			st.end(api.StreamEnd{Error: err.Error(), Code: api.CodeInternal})
			return
		}
		h.metrics.lookups.WithLabelValues(string(res.State)).Inc()
		if err := st.item(res.AppendJSON); err != nil {
			return // client went away
		}
	}
	st.end(api.StreamEnd{})
}

// lookupLine answers one line of a batch; only index failures are errors.
func (h *indexHandlers) lookupLine(r *http.Request, line []byte, set roots.Set, wait bool) (api.LookupResult, error) {
	if len(line) > MaxLineBytes {
		return api.LookupResult{State: api.StateInvalid, Message: "api: line too long"}, nil
	}
	raw, err := api.DecodeLookupLine(line)
	if err != nil {
		return api.LookupResult{State: api.StateInvalid, Message: err.Error()}, nil
	}
	p, err := cleanPath(raw)
	if err != nil {
		return api.LookupResult{Path: raw, State: api.StateInvalid, Message: err.Error()}, nil
	}
	stored, err := underRoots(p, set)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), api.ErrOutsideRoots.Error()+": ")
		return api.LookupResult{Path: p, State: api.StateOutsideRoots, Message: msg}, nil
	}
	res, err := h.index().Lookup(r.Context(), stored, wait)
	res.Path = p
	return res, err
}

// whereis answers GET /v1/whereis?key=K | digest=HEX[&backend=B] |
// path=P with the NDJSON list of locations of that content. A key with a
// size field lists only files of that size. The hash must be the one the
// Index holds (its Backend), else the answer is 400 other_backend.
func (h *indexHandlers) whereis(w http.ResponseWriter, r *http.Request) {
	q, size, err := h.whereisQuery(r)
	if err == nil {
		err = h.checkBackend(q.Backend)
	}
	if err != nil {
		if errors.Is(err, errIndex) {
			h.indexError(w, r, err)
			return
		}
		writeErr(w, err)
		return
	}
	st := newStream(w)
	err = h.index().Whereis(r.Context(), q, func(l api.Location) error {
		if size >= 0 && l.Size != size {
			return nil // the same digest with another size is not this key's content
		}
		return st.item(l.AppendJSON)
	})
	st.endErr(err, "")
}

// checkBackend refuses a hash the Index does not hold.
func (h *indexHandlers) checkBackend(b key.Backend) error {
	held := h.index().Backend()
	if held.Base() == b.Base() {
		return nil
	}
	return fmt.Errorf("%w: the index holds %s digests only (annexd --backend %s), so it cannot tell which files have the content of a %s key",
		api.ErrOtherBackend, held.Base(), held, b)
}

var errIndex = errors.New("api: index failed")

// whereisQuery reads the content asked for, and the size its files must
// have (-1: any).
func (h *indexHandlers) whereisQuery(r *http.Request) (api.WhereisQuery, int64, error) {
	v := r.URL.Query()
	switch {
	case v.Has("key"):
		return whereisByKey(v.Get("key"))
	case v.Has("digest"):
		q, err := whereisByDigest(v.Get("digest"), v.Get("backend"))
		return q, -1, err
	case v.Has("path") || v.Has("path_b64"):
		return h.whereisByPath(r, v)
	}
	return api.WhereisQuery{}, -1, fmt.Errorf("%w: give key=, digest= or path=", api.ErrBadRequest)
}

func whereisByKey(s string) (api.WhereisQuery, int64, error) {
	k, err := key.Parse(s)
	if err != nil {
		return api.WhereisQuery{}, -1, fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	d, err := k.Digest()
	if err != nil {
		return api.WhereisQuery{}, -1, fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	size, ok := k.Size()
	if !ok {
		size = -1
	}
	return api.WhereisQuery{Backend: k.Backend(), Digest: d}, size, nil
}

func whereisByDigest(hexDigest, backend string) (api.WhereisQuery, error) {
	b := key.Default
	if backend != "" {
		var err error
		if b, err = key.ParseBackend(backend); err != nil {
			return api.WhereisQuery{}, fmt.Errorf("%w: %v", api.ErrBadRequest, err)
		}
	}
	d, err := hex.DecodeString(strings.ToLower(hexDigest))
	if err != nil || len(d) != b.DigestLen() {
		return api.WhereisQuery{}, fmt.Errorf("%w: digest must be %d hex digits for %s", api.ErrBadRequest, 2*b.DigestLen(), b)
	}
	return api.WhereisQuery{Backend: b, Digest: d}, nil
}

func (h *indexHandlers) whereisByPath(r *http.Request, v url.Values) (api.WhereisQuery, int64, error) {
	p, err := pathFromQuery(v)
	if err != nil {
		return api.WhereisQuery{}, -1, err
	}
	stored, err := underRoots(p, h.roots())
	if err != nil {
		return api.WhereisQuery{}, -1, err
	}
	wait, err := boolParam(v, "wait")
	if err != nil {
		return api.WhereisQuery{}, -1, err
	}
	res, err := h.index().Lookup(r.Context(), stored, wait)
	if err != nil {
		return api.WhereisQuery{}, -1, fmt.Errorf("%w: %w", errIndex, err)
	}
	if res.State != api.StateCurrent && res.State != api.StateAnnexLink {
		return api.WhereisQuery{}, -1, fmt.Errorf("%w: %s has no current key (%s)", api.ErrNotFound, displayPath(p), res.State)
	}
	return whereisByKey(res.Key.String())
}

// dups answers GET /v1/dups?min_size=N&limit=N&after=CURSOR with
// NDJSON duplicate groups; the end line carries "next" when more remain.
// POST takes the same query and, in the body, paths one a line as dedup
// does: only groups with a file at or below one of them are listed.
func (h *indexHandlers) dups(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	var q api.DupQuery
	var err error
	if q.MinSize, err = intParam(v, "min_size"); err != nil {
		writeErr(w, err)
		return
	}
	if q.Resurvey, err = boolParam(v, "resurvey"); err != nil {
		writeErr(w, err)
		return
	}
	if r.Method == http.MethodPost {
		if q.Paths, err = dupsPaths(w, r, h.roots()); err != nil {
			writeErr(w, err)
			return
		}
	}
	limit, err := intParam(v, "limit")
	if err != nil {
		writeErr(w, err)
		return
	}
	q.Limit = int(limit)
	if q.Outside, err = boolParam(v, "outside"); err != nil {
		writeErr(w, err)
		return
	}
	if a := v.Get("after"); a != "" {
		if q.After, err = base64.RawURLEncoding.DecodeString(a); err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, "api: after: not a cursor from this API")
			return
		}
	}
	st := newStream(w)
	var last []byte
	err = h.index().Dups(r.Context(), q, func(g api.DupGroup) error {
		last = g.Cursor
		return st.item(g.AppendJSON)
	})
	next := ""
	if q.Limit > 0 && st.count == int64(q.Limit) && last != nil {
		next = base64.RawURLEncoding.EncodeToString(last)
	}
	st.endErr(err, next)
}

// dupsPaths reads the paths of a POST /v1/dups; one outside the roots
// refuses the request.
func dupsPaths(w http.ResponseWriter, r *http.Request, set roots.Set) ([][]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBatchBytes))
	if err != nil {
		return nil, fmt.Errorf("%w: read body: %v", api.ErrBadRequest, err)
	}
	paths, err := dedupPaths(body, set)
	if err == nil && len(paths) == 0 {
		err = fmt.Errorf("%w: POST /v1/dups names no path (GET lists every group)", api.ErrBadRequest)
	}
	return paths, err
}

// forget answers POST /v1/forget?path=P[&dry_run=1]: it drops the
// records at or below P that are outside the roots. P must be absolute and
// clean as given (this request deletes; nothing is guessed) and must not be
// at or below a root.
func (h *indexHandlers) forget(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	p, err := forgetPath(v, h.roots())
	if err != nil {
		writeErr(w, err)
		return
	}
	dry, err := boolParam(v, "dry_run")
	if err != nil {
		writeErr(w, err)
		return
	}
	res, err := h.index().Forget(r.Context(), p, dry)
	if err != nil {
		h.indexError(w, r, err)
		return
	}
	res.Path = p
	writeJSON(w, http.StatusOK, res)
}

// forgetPath reads the directory of a forget request and checks it.
func forgetPath(v url.Values, set roots.Set) ([]byte, error) {
	raw, err := rawPathFromQuery(v)
	if err != nil {
		return nil, err
	}
	p, err := cleanPath(raw)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(p, raw) {
		return nil, fmt.Errorf("%w: path %q is not clean (want %q)", api.ErrBadRequest, displayPath(raw), displayPath(p))
	}
	if root, ok := set.RootOf(string(p)); ok {
		return nil, fmt.Errorf("%w: %s is under the root %s, which annexd indexes: its records would come back at the next scan; "+
			"remove the files themselves, or remove %s from the roots and restart annexd first",
			api.ErrUnderRoot, displayPath(p), root, root)
	}
	return p, nil
}
