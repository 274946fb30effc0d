package apiserver

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/annexd/annexd/api"
)

// DirDupFinder finds duplicate folders (GET /v1/dups/dirs): the part
// Parts.DirDups; without it the server answers 404.
type DirDupFinder interface {
	// DirDups calls fn for each report, most reclaimable bytes first, at
	// most q.Limit of them, then for each folder of unknown content. An
	// error returned by fn stops it and is returned.
	DirDups(ctx context.Context, q api.DirDupQuery, fn func(api.DirDup) error) error
}

// dirDupHandlers answer the duplicate folders.
type dirDupHandlers struct{ common }

// dirDups answers GET /v1/dups/dirs?min_size=N&limit=N with NDJSON
// DirDup lines. POST takes paths in the body, one a line as dedup does:
// only reports with a folder at or below one of them.
func (h *dirDupHandlers) dirDups(w http.ResponseWriter, r *http.Request) {
	f := h.part().DirDups
	if f == nil {
		writeError(w, http.StatusNotFound, api.CodeNotSupported, "api: "+noDirDups)
		return
	}
	q, err := h.query(w, r)
	if err != nil {
		writeErr(w, err)
		return
	}
	st := newStream(w)
	err = f.DirDups(r.Context(), q, func(d api.DirDup) error { return st.item(d.AppendJSON) })
	st.endErr(err, "")
}

// dirDupQuery reads the query and, for POST, the paths of the body.
func (h *dirDupHandlers) query(w http.ResponseWriter, r *http.Request) (api.DirDupQuery, error) {
	var q api.DirDupQuery
	v := r.URL.Query()
	var err error
	if q.MinSize, err = intParam(v, "min_size"); err != nil {
		return q, err
	}
	limit, err := intParam(v, "limit")
	if err != nil {
		return q, err
	}
	q.Limit = int(limit)
	if r.Method != http.MethodPost {
		return q, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBatchBytes))
	if err != nil {
		return q, fmt.Errorf("%w: read body: %v", api.ErrBadRequest, err)
	}
	if q.Paths, err = dedupPaths(body, h.roots()); err == nil && len(q.Paths) == 0 {
		err = fmt.Errorf("%w: POST /v1/dups/dirs names no path (GET lists every folder)", api.ErrBadRequest)
	}
	return q, err
}
