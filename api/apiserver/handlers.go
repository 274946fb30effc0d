package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/key"
)

const maxPathBytes = 4096 // PATH_MAX

func (s *Server) handlePing(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.Ping{OK: true, Version: s.cfg.Version, APIVersion: api.APIVersion})
}

// handleLookup answers GET /v1/lookup?path=P[&wait=1] with one LookupResult.
func (s *Server) handleLookup(w http.ResponseWriter, r *http.Request) {
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
	stored, err := underRoots(p, s.roots())
	if err != nil {
		writeErr(w, err)
		return
	}
	res, err := s.index().Lookup(r.Context(), stored, wait)
	if err != nil {
		s.indexError(w, r, err)
		return
	}
	res.Path = p
	s.metrics.lookups.WithLabelValues(string(res.State)).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(res.AppendJSON(nil), '\n'))
}

// handleLookupBatch answers POST /v1/lookup: the body has one JSON object
// per line ({"path": …} or {"path_b64": …}); the answer has one
// LookupResult per line, in the same order, then the end line. A line that
// cannot be read gets StateInvalid; a path outside the roots gets
// StateOutsideRoots; neither stops the batch.
func (s *Server) handleLookupBatch(w http.ResponseWriter, r *http.Request) {
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
	set := s.roots()
	st := newStream(w)
	for len(body) > 0 {
		var line []byte
		line, body, _ = bytes.Cut(body, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		res, err := s.lookupLine(r, line, set, wait)
		if err != nil && r.Context().Err() != nil {
			return // the client left; nobody reads the rest
		}
		if err != nil {
			s.log.Error("api lookup failed", "err", err)
			st.end(api.StreamEnd{Error: err.Error(), Code: api.CodeInternal})
			return
		}
		s.metrics.lookups.WithLabelValues(string(res.State)).Inc()
		if err := st.item(res.AppendJSON); err != nil {
			return // client went away
		}
	}
	st.end(api.StreamEnd{})
}

// lookupLine answers one line of a batch; only index failures are errors.
func (s *Server) lookupLine(r *http.Request, line []byte, set roots.Set, wait bool) (api.LookupResult, error) {
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
	res, err := s.index().Lookup(r.Context(), stored, wait)
	res.Path = p
	return res, err
}

// handleWhereis answers GET /v1/whereis?key=K | digest=HEX[&backend=B] |
// path=P with the NDJSON list of locations of that content. A key with a
// size field lists only files of that size. The hash must be the one the
// Index holds (its Backend), else the answer is 400 other_backend.
func (s *Server) handleWhereis(w http.ResponseWriter, r *http.Request) {
	q, size, err := s.whereisQuery(r)
	if err == nil {
		err = s.checkBackend(q.Backend)
	}
	if err != nil {
		if errors.Is(err, errIndex) {
			s.indexError(w, r, err)
			return
		}
		writeErr(w, err)
		return
	}
	st := newStream(w)
	err = s.index().Whereis(r.Context(), q, func(l api.Location) error {
		if size >= 0 && l.Size != size {
			return nil // the same digest with another size is not this key's content
		}
		return st.item(l.AppendJSON)
	})
	st.endErr(err, "")
}

// checkBackend refuses a hash the Index does not hold.
func (s *Server) checkBackend(b key.Backend) error {
	held := s.index().Backend()
	if held.Base() == b.Base() {
		return nil
	}
	return fmt.Errorf("%w: the index holds %s digests only (annexd --backend %s), so it cannot tell which files have the content of a %s key",
		api.ErrOtherBackend, held.Base(), held, b)
}

var errIndex = errors.New("api: index failed")

// whereisQuery reads the content asked for, and the size its files must
// have (-1: any).
func (s *Server) whereisQuery(r *http.Request) (api.WhereisQuery, int64, error) {
	v := r.URL.Query()
	switch {
	case v.Has("key"):
		return whereisByKey(v.Get("key"))
	case v.Has("digest"):
		q, err := whereisByDigest(v.Get("digest"), v.Get("backend"))
		return q, -1, err
	case v.Has("path") || v.Has("path_b64"):
		return s.whereisByPath(r, v)
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

func (s *Server) whereisByPath(r *http.Request, v url.Values) (api.WhereisQuery, int64, error) {
	p, err := pathFromQuery(v)
	if err != nil {
		return api.WhereisQuery{}, -1, err
	}
	stored, err := underRoots(p, s.roots())
	if err != nil {
		return api.WhereisQuery{}, -1, err
	}
	wait, err := boolParam(v, "wait")
	if err != nil {
		return api.WhereisQuery{}, -1, err
	}
	res, err := s.index().Lookup(r.Context(), stored, wait)
	if err != nil {
		return api.WhereisQuery{}, -1, fmt.Errorf("%w: %w", errIndex, err)
	}
	if res.State != api.StateCurrent && res.State != api.StateAnnexLink {
		return api.WhereisQuery{}, -1, fmt.Errorf("%w: %s has no current key (%s)", api.ErrNotFound, displayPath(p), res.State)
	}
	return whereisByKey(res.Key.String())
}

// handleDups answers GET /v1/dups?min_size=N&limit=N&after=CURSOR with
// NDJSON duplicate groups; the end line carries "next" when more remain.
// POST takes the same query and, in the body, paths one a line as dedup
// does: only groups with a file at or below one of them are listed.
func (s *Server) handleDups(w http.ResponseWriter, r *http.Request) {
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
		if q.Paths, err = dupsPaths(w, r, s.roots()); err != nil {
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
	err = s.index().Dups(r.Context(), q, func(g api.DupGroup) error {
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

// handleForget answers POST /v1/forget?path=P[&dry_run=1]: it drops the
// records at or below P that are outside the roots. P must be absolute and
// clean as given (this request deletes; nothing is guessed) and must not be
// at or below a root.
func (s *Server) handleForget(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	p, err := forgetPath(v, s.roots())
	if err != nil {
		writeErr(w, err)
		return
	}
	dry, err := boolParam(v, "dry_run")
	if err != nil {
		writeErr(w, err)
		return
	}
	res, err := s.index().Forget(r.Context(), p, dry)
	if err != nil {
		s.indexError(w, r, err)
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

// handleStatus answers GET /v1/status; with wait=idle it first syncs the
// Index (Index.Sync), then waits until the daemon is idle, the timeout
// (default 30s, at most 5m, for both) passes, the client leaves or the
// server shuts down, and then answers with the status. A sync that did not
// finish in time makes the answer not idle.
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

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
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
		if !s.waitStarted(r, timeout) {
			if r.Context().Err() == nil {
				st, err := s.status(r.Context())
				st.Idle = false
				s.writeStatus(w, r, st, err)
			}
			return
		}
		if synced = s.sync(r, max(timeout-time.Since(start), 0)); r.Context().Err() != nil {
			return // the client is gone
		}
		timeout = max(timeout-time.Since(start), 0)
	}
	st, err := s.status(r.Context())
	if wait != "" && err == nil && !st.Idle {
		st, err = s.waitIdle(r, timeout)
	}
	if !synced {
		st.Idle = false // changes made before the request may not be seen yet
	}
	s.writeStatus(w, r, st, err)
}

func (s *Server) writeStatus(w http.ResponseWriter, r *http.Request, st api.Status, err error) {
	if err != nil {
		s.indexError(w, r, err)
		return
	}
	st.APIVersion = api.APIVersion
	writeJSON(w, http.StatusOK, st)
}

// waitStarted waits until the server has its parts (Ready), the timeout
// passes, the client leaves or the server shuts down; it reports whether
// it has them.
func (s *Server) waitStarted(r *http.Request, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	select {
	case <-s.ready:
		return true
	case <-deadline.C:
	case <-s.closing:
	case <-r.Context().Done():
	}
	return false
}

// sync makes the Index see every change made before the request; it
// reports false when the timeout ran out first. Other failures are
// logged: the wait is then for idle only.
func (s *Server) sync(r *http.Request, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	err := s.index().Sync(ctx)
	switch {
	case err == nil:
		return true
	case errors.Is(err, context.DeadlineExceeded):
		return false
	case r.Context().Err() != nil:
		return false
	}
	s.log.Warn("sync failed; waiting for idle only", "err", err)
	return true
}

func (s *Server) waitIdle(r *http.Request, timeout time.Duration) (api.Status, error) {
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	idx := s.index()
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

// indexError reports a failure of the Index before a stream started.
func (s *Server) indexError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client is gone; nobody reads the answer
	}
	s.log.Error("api index failed", "path", r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
}

// stream writes NDJSON items and the end line.
type stream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	bw    *bufio.Writer
	buf   []byte
	count int64
	err   error
}

func newStream(w http.ResponseWriter) *stream {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	return &stream{w: w, rc: rc, bw: bufio.NewWriterSize(deadlineWriter{w: w, rc: rc}, 64<<10), buf: make([]byte, 0, 1024)}
}

// streamWriteTimeout bounds each write of a stream (a variable for tests).
var streamWriteTimeout = time.Minute

// deadlineWriter gives every write of a stream its own deadline, so a
// client that stops reading frees the handler after streamWriteTimeout
// while a long stream that keeps moving is never cut.
type deadlineWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)) // unsupported writers: no deadline
	return d.w.Write(p)
}

func (st *stream) item(appendJSON func([]byte) []byte) error {
	if st.err != nil {
		return st.err
	}
	st.buf = append(appendJSON(st.buf[:0]), '\n')
	_, st.err = st.bw.Write(st.buf)
	st.count++
	return st.err
}

func (st *stream) endErr(err error, next string) {
	e := api.StreamEnd{Next: next}
	if err != nil && st.err == nil {
		e.Error, e.Code, e.Next = err.Error(), api.CodeInternal, ""
	}
	st.end(e)
}

func (st *stream) end(e api.StreamEnd) {
	if st.err != nil {
		return
	}
	e.End, e.Count = true, st.count
	b, _ := json.Marshal(e)
	st.bw.Write(append(b, '\n'))
	st.bw.Flush()
	// The connection may serve further requests: no deadline left behind.
	_ = st.rc.SetWriteDeadline(time.Time{})
}

// pathFromQuery reads path= or path_b64= and cleans it.
func pathFromQuery(v url.Values) ([]byte, error) {
	raw, err := rawPathFromQuery(v)
	if err != nil {
		return nil, err
	}
	return cleanPath(raw)
}

// rawPathFromQuery reads path= or path_b64= as sent.
func rawPathFromQuery(v url.Values) ([]byte, error) {
	var in api.PathIn
	if v.Has("path_b64") {
		s := v.Get("path_b64")
		in.PathB64 = &s
	} else if v.Has("path") {
		s := v.Get("path")
		in.Path = &s
	}
	return in.Bytes()
}

// cleanPath checks that p is a usable absolute path and cleans it
// lexically.
func cleanPath(p []byte) ([]byte, error) {
	switch {
	case len(p) == 0:
		return nil, fmt.Errorf("%w: empty path", api.ErrBadRequest)
	case len(p) > maxPathBytes:
		return nil, fmt.Errorf("%w: path longer than %d bytes", api.ErrBadRequest, maxPathBytes)
	case p[0] != '/':
		return nil, fmt.Errorf("%w: path %q is not absolute", api.ErrBadRequest, displayPath(p))
	case bytes.IndexByte(p, 0) >= 0:
		return nil, fmt.Errorf("%w: path contains a NUL byte", api.ErrBadRequest)
	}
	return []byte(path.Clean(string(p))), nil
}

// roots returns the Index's roots with their aliases.
func (s *Server) roots() roots.Set { return roots.Of(s.index().Roots(), s.cfg.RootAliases) }

// underRoots returns p spelled as the index stores it, or ErrOutsideRoots
// unless p is a root or below one, by either spelling.
func underRoots(p []byte, set roots.Set) ([]byte, error) {
	q, ok := set.Canonical(string(p))
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %s is not under %s", api.ErrOutsideRoots, displayPath(p), set)
	case q == string(p):
		return p, nil
	}
	return []byte(q), nil
}

func displayPath(p []byte) string { return strings.ToValidUTF8(string(p), "\uFFFD") }

func boolParam(v url.Values, name string) (bool, error) {
	s := v.Get(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%w: %s must be 1/0 or true/false", api.ErrBadRequest, name)
	}
	return b, nil
}

func intParam(v url.Values, name string) (int64, error) {
	s := v.Get(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s must be a non-negative integer", api.ErrBadRequest, name)
	}
	return n, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "api: encode: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(api.ErrorBody{Error: msg, Code: code})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeErr maps a request error to its status.
func writeErr(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, api.ErrOutsideRoots):
		writeError(w, http.StatusBadRequest, api.CodeOutsideRoots, err.Error())
	case errors.Is(err, api.ErrUnderRoot):
		writeError(w, http.StatusBadRequest, api.CodeUnderRoot, err.Error())
	case errors.Is(err, api.ErrOtherBackend):
		msg := "api: " + strings.TrimPrefix(err.Error(), api.ErrOtherBackend.Error()+": ")
		writeError(w, http.StatusBadRequest, api.CodeOtherBackend, msg)
	case errors.Is(err, api.ErrNotFound):
		writeError(w, http.StatusNotFound, api.CodeNotFound, err.Error())
	case errors.Is(err, api.ErrBadRequest):
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
	case errors.Is(err, api.ErrStarting):
		writeError(w, http.StatusServiceUnavailable, api.CodeStarting, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
	}
}
