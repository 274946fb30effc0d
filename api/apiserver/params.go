package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/roots"
)

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
