package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/annexd/annexd/api"
)

// auditHandlers answer /v1/audit/...; without an audit part, 404.
type auditHandlers struct{ common }

// Bounds of a long poll for an audit run's end (?wait=1).
const (
	defaultWaitRun = 30 * time.Second
	maxWaitRun     = 5 * time.Minute
)

// auditor returns the audit part, or answers 404 without one.
func (h *auditHandlers) auditor(w http.ResponseWriter) (api.Auditor, bool) {
	au := h.part().Audit
	if au == nil {
		writeError(w, http.StatusNotFound, api.CodeNotSupported, "api: "+noAudit)
	}
	return au, au != nil
}

// run answers POST /v1/audit/run[?time_limit=D&full_speed=1]:
// the body lists paths ({"path"} or {"path_b64"} lines; none: the whole
// index). The answer is the new run's id; the run goes on without the
// request.
func (h *auditHandlers) run(w http.ResponseWriter, r *http.Request) {
	au, ok := h.auditor(w)
	if !ok {
		return
	}
	var req api.AuditRequest
	v := r.URL.Query()
	var err error
	if req.FullSpeed, err = boolParam(v, "full_speed"); err != nil {
		writeErr(w, err)
		return
	}
	if t := v.Get("time_limit"); t != "" {
		if req.TimeLimit, err = time.ParseDuration(t); err != nil || req.TimeLimit < 0 {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, "api: time_limit: want a duration such as 5h")
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBatchBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "api: read body: "+err.Error())
		return
	}
	if req.Paths, err = dedupPaths(body, h.roots()); err != nil {
		writeErr(w, err)
		return
	}
	id, err := au.AuditStart(r.Context(), req)
	if errors.Is(err, api.ErrNotFound) {
		msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), api.ErrNotFound.Error()+": "), "audit: ")
		writeError(w, http.StatusNotFound, api.CodeNotFound, "api: "+msg)
		return
	}
	if err != nil {
		h.indexError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		ID uint64 `json:"id"`
	}{id})
}

// runGet answers GET /v1/audit/runs/{id}[?wait=1&timeout=D]:
// the run's summary; with wait, once it has ended or after the timeout
// (default 30 s, at most 5 min), or when the server shuts down.
func (h *auditHandlers) runGet(w http.ResponseWriter, r *http.Request) {
	au, ok := h.auditor(w)
	if !ok {
		return
	}
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "api: a run id is a number")
		return
	}
	v := r.URL.Query()
	wait, err := boolParam(v, "wait")
	if err != nil {
		writeErr(w, err)
		return
	}
	timeout, ok := timeoutParam(w, v, defaultWaitRun, maxWaitRun)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	h.cancelOnClose(ctx, cancel)
	run, err := au.AuditRun(ctx, id, wait)
	switch {
	case errors.Is(err, api.ErrNotFound):
		writeError(w, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("api: no audit run %d (the daemon keeps the last 16)", id))
	case err != nil:
		h.indexError(w, r, err)
	default:
		writeJSON(w, http.StatusOK, run)
	}
}

// status answers GET /v1/audit/status.
func (h *auditHandlers) status(w http.ResponseWriter, r *http.Request) {
	au, ok := h.auditor(w)
	if !ok {
		return
	}
	st, err := au.AuditStatus(r.Context())
	if err != nil {
		h.indexError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// history answers GET /v1/audit/history: {"passes": [...]}, the passes
// completed, oldest first (the last 100).
func (h *auditHandlers) history(w http.ResponseWriter, r *http.Request) {
	au, ok := h.auditor(w)
	if !ok {
		return
	}
	passes, err := au.AuditHistory(r.Context())
	if err != nil {
		h.indexError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.AuditHistory{Passes: passes})
}

// problems answers GET /v1/audit/problems with one NDJSON
// object per file found not ok, then the end line.
func (h *auditHandlers) problems(w http.ResponseWriter, r *http.Request) {
	au, ok := h.auditor(w)
	if !ok {
		return
	}
	st := newStream(w)
	err := au.AuditProblems(r.Context(), func(p api.AuditProblem) error {
		b, err := p.MarshalJSON()
		if err != nil {
			return err
		}
		return st.item(func(buf []byte) []byte { return append(buf, b...) })
	})
	if err != nil && r.Context().Err() == nil && st.err == nil {
		h.log.Error("api audit problems failed", "err", err)
	}
	st.endErr(err, "")
}

// pause answers POST /v1/audit/pause and /v1/audit/resume
// with the audit's status after.
func (h *auditHandlers) pause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		au, ok := h.auditor(w)
		if !ok {
			return
		}
		if err := au.AuditPause(r.Context(), paused); err != nil {
			h.indexError(w, r, err)
			return
		}
		h.status(w, r)
	}
}

// accept answers POST /v1/audit/accept?path=P: the files
// flagged at or below P take the content they have now.
func (h *auditHandlers) accept(w http.ResponseWriter, r *http.Request) {
	au, ok := h.auditor(w)
	if !ok {
		return
	}
	p, err := pathFromQuery(r.URL.Query())
	if err != nil {
		writeErr(w, err)
		return
	}
	stored, err := underRoots(p, h.roots())
	if err != nil {
		writeErr(w, err)
		return
	}
	res, err := au.AuditAccept(r.Context(), stored)
	switch {
	case errors.Is(err, api.ErrNotFound):
		writeError(w, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("api: the audit flagged nothing at or below %s", displayPath(p)))
	case err != nil:
		h.indexError(w, r, err)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

// heal answers POST /v1/audit/heal: the body is {"paths": [...],
// "dry_run": bool} (paths_b64 for paths not UTF-8; no paths: every
// finding), the answer each flagged file's outcome (api.AuditHealResult).
func (h *auditHandlers) heal(w http.ResponseWriter, r *http.Request) {
	hl := h.part().Heal
	if hl == nil {
		writeError(w, http.StatusNotFound, api.CodeNotSupported, "api: this daemon does not heal: it was started without its heal part")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBatchBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "api: read body: "+err.Error())
		return
	}
	var req api.AuditHealRequest
	if len(body) > 0 {
		if err := req.UnmarshalJSON(body); err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, `api: want {"paths": ["/abs/path", ...], "dry_run": false}: `+err.Error())
			return
		}
	}
	for i, p := range req.Paths {
		if req.Paths[i], err = underRoots(p, h.roots()); err != nil {
			writeErr(w, err)
			return
		}
	}
	res, err := hl.AuditHeal(r.Context(), req)
	if err != nil {
		h.indexError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
