package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
)

// haveHandlers answer /v1/have; without a have part, 404.
type haveHandlers struct{ common }

// Haver answers have queries (GET and POST /v1/have). The daemon passes
// it in Config.Have; without one the server answers 501.
type Haver interface {
	// Backend is the backend the index hashes with: a client hashes with
	// it, and keys of another hash are refused.
	Backend() key.Backend
	// Have returns the indexed copies of k's content (its digest and
	// size), in path order, each marked stale, outside the roots or
	// absent as the index knows it now.
	Have(ctx context.Context, k key.Key) ([]api.HaveCopy, error)
}

// haver returns the Haver, or answers 404 and returns nil.
func (hs *haveHandlers) haver(w http.ResponseWriter) Haver {
	h := hs.part().Have
	if h == nil {
		writeError(w, http.StatusNotFound, api.CodeNotSupported, "api: "+noHave)
	}
	return h
}

// info answers GET /v1/have with the backend to hash with.
func (hs *haveHandlers) info(w http.ResponseWriter, r *http.Request) {
	if h := hs.haver(w); h != nil {
		writeJSON(w, http.StatusOK, api.HaveInfo{Backend: h.Backend().String()})
	}
}

// have answers POST /v1/have: the body holds {"key":K} lines, the
// answer one have answer per key, in order. A bad line refuses the whole
// request before anything is answered.
func (hs *haveHandlers) have(w http.ResponseWriter, r *http.Request) {
	h := hs.haver(w)
	if h == nil {
		return
	}
	keys, err := haveKeys(w, r, h.Backend())
	if err != nil {
		writeErr(w, err)
		return
	}
	st := newStream(w)
	for _, k := range keys {
		copies, err := h.Have(r.Context(), k)
		if err != nil {
			st.endErr(err, "")
			return
		}
		if err := st.item(api.HaveAnswer{Key: k, Copies: copies}.AppendJSON); err != nil {
			return // the client went away
		}
	}
	st.end(api.StreamEnd{})
}

// haveKeys reads the body's keys: each of the index's hash, with a size.
func haveKeys(w http.ResponseWriter, r *http.Request, b key.Backend) ([]key.Key, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBatchBytes))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, fmt.Errorf("%w: body larger than %d bytes; send fewer keys per request", api.ErrBadRequest, MaxBatchBytes)
	case err != nil:
		return nil, fmt.Errorf("%w: read body: %v", api.ErrBadRequest, err)
	}
	var keys []key.Key
	for line := range bytes.Lines(body) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		k, err := haveKey(line, b)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func haveKey(line []byte, b key.Backend) (key.Key, error) {
	var in struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(line, &in); err != nil {
		return key.Key{}, fmt.Errorf("%w: have line %q: %v", api.ErrBadRequest, line, err)
	}
	k, err := key.Parse(in.Key)
	if err != nil {
		return key.Key{}, fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	if k.Backend().Base() != b.Base() {
		return key.Key{}, fmt.Errorf("%w: the index holds %s digests only, not those of %s", api.ErrOtherBackend, b.Base(), k)
	}
	if _, ok := k.Size(); !ok {
		return key.Key{}, fmt.Errorf("%w: %s has no size (-s); have needs it", api.ErrBadRequest, k)
	}
	return k, nil
}
