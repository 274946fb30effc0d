package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/roots"
)

// dedupHandlers answer /v1/dedup; without a dedup part, 404.
type dedupHandlers struct{ common }

// dedup answers POST /v1/dedup: the body lists paths ({"path"} or
// {"path_b64"} lines; none: every root), the query sets dry_run,
// hardlink, min_size, groups and progress. The answer is a stream of
// events ending with the result. The run acts for the peer's uid and
// groups; it stops between actions when the client half-closes or
// leaves, or the server shuts down.
func (h *dedupHandlers) dedup(w http.ResponseWriter, r *http.Request) {
	d := h.part().Dedup
	if d == nil {
		writeError(w, http.StatusNotFound, api.CodeNotSupported, "api: "+noDedup)
		return
	}
	p := peerFrom(r.Context())
	if (p.tcp && !p.page) || !p.known || p.uid < 0 {
		writeError(w, http.StatusForbidden, api.CodeForbidden,
			"api: dedup acts for the user who asks, who is known only on the unix socket and the page")
		return
	}
	req, err := dedupRequest(w, r, h.roots())
	if err != nil {
		writeErr(w, err)
		return
	}
	req.UID, req.GIDs = uint32(p.uid), p.gids
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	h.cancelOnClose(ctx, cancel)
	start := time.Now()
	ds := &dedupStream{w: w}
	res, err := d.Dedup(ctx, req, ds.send)
	res.Seconds = time.Since(start).Seconds()
	if ds.st == nil && err != nil && ctx.Err() == nil { // nothing was done
		if errors.Is(err, api.ErrBadRequest) {
			writeErr(w, err)
		} else {
			h.indexError(w, r, err)
		}
		return
	}
	if err != nil && !errors.Is(err, api.ErrUnsupported) && ctx.Err() == nil {
		h.log.Error("api dedup failed", "err", err)
	}
	ds.end(res, err, ctx.Err() != nil)
}

// dedupRequest reads the query and the body's paths. A path outside the
// roots refuses the whole request.
func dedupRequest(w http.ResponseWriter, r *http.Request, set roots.Set) (api.DedupRequest, error) {
	var req api.DedupRequest
	v := r.URL.Query()
	var err error
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"dry_run", &req.DryRun}, {"hardlink", &req.Hardlink}, {"trash", &req.Trash}, {"progress", &req.Progress}} {
		if *b.dst, err = boolParam(v, b.name); err != nil {
			return req, err
		}
	}
	if req.MinSize, err = intParam(v, "min_size"); err != nil {
		return req, err
	}
	if req.Keep, req.DataHome, err = keepParams(v, req); err != nil {
		return req, err
	}
	if req.Groups, err = groupsParam(v); err != nil {
		return req, err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBatchBytes))
	if err != nil {
		return req, fmt.Errorf("%w: read body: %v", api.ErrBadRequest, err)
	}
	req.Paths, err = dedupPaths(body, set)
	return req, err
}

// groupsParam reads groups=N or groups=all (-1).
func groupsParam(v url.Values) (int, error) {
	if v.Get("groups") == "all" {
		return -1, nil
	}
	n, err := intParam(v, "groups")
	if err != nil || n > 1<<30 {
		return 0, fmt.Errorf("%w: groups must be a count or \"all\"", api.ErrBadRequest)
	}
	return int(n), nil
}

// dedupPaths reads one path a line, each spelled as the index stores it.
func dedupPaths(body []byte, set roots.Set) ([][]byte, error) {
	var out [][]byte
	for len(body) > 0 {
		var line []byte
		line, body, _ = bytes.Cut(body, []byte{'\n'})
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if len(line) > MaxLineBytes {
			return nil, fmt.Errorf("%w: line too long", api.ErrBadRequest)
		}
		raw, err := api.DecodeLookupLine(line)
		if err != nil {
			return nil, err
		}
		p, err := cleanPath(raw)
		if err != nil {
			return nil, err
		}
		stored, err := underRoots(p, set)
		if err != nil {
			return nil, err
		}
		out = append(out, stored)
	}
	return out, nil
}

// dedupStream writes a run's events as they come, each flushed at once so
// that progress is seen while the run goes on. The stream starts with
// the first event, so an error before it is an ordinary error answer.
type dedupStream struct {
	w  http.ResponseWriter
	st *stream
}

func (ds *dedupStream) send(ev api.DedupEvent) error {
	if ds.st == nil {
		ds.st = newStream(ds.w)
	}
	if err := ds.st.item(ev.AppendJSON); err != nil {
		return err
	}
	if err := ds.st.bw.Flush(); err != nil {
		ds.st.err = err
		return err
	}
	return ds.st.rc.Flush()
}

// end writes the end line with the result and what stopped the run.
func (ds *dedupStream) end(res api.DedupResult, err error, stopped bool) {
	if ds.st == nil {
		ds.st = newStream(ds.w)
	}
	st := ds.st
	if st.err != nil {
		return // the client is gone
	}
	e := api.DedupEnd{End: true, Count: st.count, Result: &res}
	switch {
	case errors.Is(err, api.ErrUnsupported):
		e.Code, e.Error = api.CodeUnsupported, err.Error()
	case stopped:
		e.Code, e.Error = api.CodeInterrupted, "api: dedup stopped before its end; the result counts what was done"
	case err != nil:
		e.Code, e.Error = api.CodeInternal, err.Error()
	}
	b, _ := json.Marshal(e)
	st.bw.Write(append(b, '\n'))
	st.bw.Flush()
	_ = st.rc.SetWriteDeadline(time.Time{})
}

// peerGroups returns gid and the supplementary groups of a unix socket's
// peer, read with SO_PEERGROUPS (Linux 4.13). Where that fails, the peer
// has gid alone: it may then do less, never more.
func peerGroups(fd int, gid uint32) []uint32 {
	buf := make([]uint32, 64)
	for range 2 {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case e == unix.ERANGE:
			buf = make([]uint32, n/4+1)
			continue
		case e != 0:
			return []uint32{gid}
		}
		return append([]uint32{gid}, buf[:n/4]...)
	}
	return []uint32{gid}
}
