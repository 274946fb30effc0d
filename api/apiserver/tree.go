package apiserver

import (
	"errors"
	"net/http"

	"github.com/annexd/annexd/api"
)

// noTree is what /v1/tree answers without its part.
const noTree = "this daemon does not count its tree by folder: it was started without that part " +
	"(annexd always has one)"

// treeHandlers answer the indexed tree one folder level at a time.
type treeHandlers struct{ common }

// level answers GET /v1/tree[?path=P] with a TreeLevel: the folder P
// (or, without it, the roots) and its children.
func (h *treeHandlers) level(w http.ResponseWriter, r *http.Request) {
	t := h.part().Tree
	if t == nil {
		writeError(w, http.StatusNotFound, api.CodeNotSupported, "api: "+noTree)
		return
	}
	var p []byte
	if v := r.URL.Query(); v.Has("path") || v.Has("path_b64") {
		raw, err := pathFromQuery(v)
		if err == nil {
			p, err = underRoots(raw, h.roots())
		}
		if err != nil {
			writeErr(w, err)
			return
		}
	}
	lvl, err := t.TreeLevel(r.Context(), p)
	if errors.Is(err, api.ErrNotFound) {
		writeErr(w, err)
		return
	}
	if err != nil {
		h.indexError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, lvl)
}
