package api

import (
	"errors"
	"fmt"
)

// Errors of the api package. Client methods wrap them with %w; the server
// maps them to HTTP statuses.
var (
	// ErrNoDaemon: nothing answers on the socket. Client errors that wrap it
	// are *NoDaemonError, which names the socket.
	ErrNoDaemon = errors.New("api: daemon not running")
	// ErrForbidden: the daemon refused this user (403).
	ErrForbidden = errors.New("api: forbidden")
	// ErrUnauthorized: a TCP request without the right bearer token (401).
	ErrUnauthorized = errors.New("api: unauthorized")
	// ErrBadRequest: the request was malformed (400).
	ErrBadRequest = errors.New("api: bad request")
	// ErrOutsideRoots: a path is not under any watched root.
	ErrOutsideRoots = errors.New("api: path outside the watched roots")
	// ErrUnderRoot: a path at or below a watched root where the request
	// wants one outside them (forget).
	ErrUnderRoot = errors.New("api: path under a watched root")
	// ErrNotFound: the thing asked about is not in the index.
	ErrNotFound = errors.New("api: not found")
	// ErrBadResponse: the daemon's answer could not be read, or a stream
	// ended without its end line.
	ErrBadResponse = errors.New("api: bad response")
	// ErrServer: the daemon reported an internal error (5xx).
	ErrServer = errors.New("api: server error")
	// ErrConfig: no usable socket path could be formed (DefaultSocketPath).
	ErrConfig = errors.New("api: bad configuration")
)

// NoDaemonError says that no daemon answered on Socket.
type NoDaemonError struct {
	Socket string
	Err    error // the dial error
}

func (e *NoDaemonError) Error() string {
	return fmt.Sprintf("api: annexd is not running (no answer on %s: %v)", e.Socket, e.Err)
}

// Is makes errors.Is(err, ErrNoDaemon) true.
func (e *NoDaemonError) Is(target error) bool { return target == ErrNoDaemon }

func (e *NoDaemonError) Unwrap() error { return e.Err }

// StatusError is a non-2xx answer from the daemon.
type StatusError struct {
	Status  int    // HTTP status
	Code    string // Code* constant from the body
	Message string // the body's error text
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("api: daemon answered %d: %s", e.Status, e.Message)
}

// Is maps statuses and codes to the package's sentinels.
func (e *StatusError) Is(target error) bool {
	switch target {
	case ErrForbidden:
		return e.Status == 403
	case ErrUnauthorized:
		return e.Status == 401
	case ErrBadRequest:
		return e.Status == 400 || e.Status == 413
	case ErrOutsideRoots:
		return e.Code == CodeOutsideRoots
	case ErrUnderRoot:
		return e.Code == CodeUnderRoot
	case ErrNotFound:
		return e.Status == 404
	case ErrServer:
		return e.Status >= 500
	}
	return false
}
