package apiserver

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/annexd/annexd/api"
)

// statusHandlers answer GET /v1/status, before Ready (Starting's status)
// and after (the Index's), and its long poll for idle.
type statusHandlers struct {
	common
	starting Starting        // the daemon before Ready
	ready    <-chan struct{} // closed by Ready
}

// status is the daemon's status: the Index's once Ready, else Starting's.
func (h *statusHandlers) status(ctx context.Context) (api.Status, error) {
	if p := h.part(); p != nil {
		return p.Index.Status(ctx)
	}
	return h.starting.Status(ctx)
}

// timeoutParam reads a long poll's timeout parameter: def when absent, at
// most limit. A bad value is answered here, and ok is false.
func timeoutParam(w http.ResponseWriter, v url.Values, def, limit time.Duration) (d time.Duration, ok bool) {
	t := v.Get("timeout")
	if t == "" {
		return def, true
	}
	d, err := time.ParseDuration(t)
	if err != nil || d < 0 {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "api: timeout: want a duration such as 30s")
		return 0, false
	}
	return min(d, limit), true
}

// get answers GET /v1/status; with wait=idle it first syncs the
// Index (Index.Sync), then waits until the daemon is idle, the timeout
// (default 30s, at most 5m, for both) passes, the client leaves or the
// server shuts down, and then answers with the status. A sync that did not
// finish in time makes the answer not idle.
func (h *statusHandlers) get(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	wait := v.Get("wait")
	if wait != "" && wait != "idle" {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, `api: wait must be "idle"`)
		return
	}
	timeout, ok := timeoutParam(w, v, defaultWaitIdle, maxWaitIdle)
	if !ok {
		return
	}
	synced := true
	if wait != "" {
		start := time.Now()
		if !h.waitStarted(r, timeout) {
			if r.Context().Err() == nil {
				st, err := h.status(r.Context())
				st.Idle = false
				h.write(w, r, st, err)
			}
			return
		}
		if synced = h.sync(r, max(timeout-time.Since(start), 0)); r.Context().Err() != nil {
			return // the client is gone
		}
		timeout = max(timeout-time.Since(start), 0)
	}
	st, err := h.status(r.Context())
	if wait != "" && err == nil && !st.Idle {
		st, err = h.waitIdle(r, timeout)
	}
	if !synced {
		st.Idle = false // changes made before the request may not be seen yet
	}
	h.write(w, r, st, err)
}

func (h *statusHandlers) write(w http.ResponseWriter, r *http.Request, st api.Status, err error) {
	if err != nil {
		h.indexError(w, r, err)
		return
	}
	st.APIVersion = api.APIVersion
	writeJSON(w, http.StatusOK, st)
}

// waitStarted waits until the server has its parts (Ready), the timeout
// passes, the client leaves or the server shuts down; it reports whether
// it has them.
func (h *statusHandlers) waitStarted(r *http.Request, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	select {
	case <-h.ready:
		return true
	case <-deadline.C:
	case <-h.closing:
	case <-r.Context().Done():
	}
	return false
}

// sync makes the Index see every change made before the request; it
// reports false when the timeout ran out first. Other failures are
// logged: the wait is then for idle only.
func (h *statusHandlers) sync(r *http.Request, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	err := h.index().Sync(ctx)
	switch {
	case err == nil:
		return true
	case errors.Is(err, context.DeadlineExceeded):
		return false
	case r.Context().Err() != nil:
		return false
	}
	h.log.Warn("sync failed; waiting for idle only", "err", err)
	return true
}

func (h *statusHandlers) waitIdle(r *http.Request, timeout time.Duration) (api.Status, error) {
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	h.cancelOnClose(ctx, cancel)
	idx := h.index()
	waited := false
	for {
		st, err := idx.Status(r.Context())
		if err != nil || st.Idle || ctx.Err() != nil {
			if r.Context().Err() != nil {
				return api.Status{}, r.Context().Err()
			}
			return st, err
		}
		if !waited {
			waited = true
			_ = idx.WaitIdle(ctx)
			continue
		}
		// Busy for a reason WaitIdle does not cover: look again a little
		// later.
		waited = false
		select {
		case <-time.After(idlePollInterval):
		case <-ctx.Done():
		}
	}
}
