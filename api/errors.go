package api

import (
	"errors"
	"fmt"
	"time"
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
	// ErrOtherBackend: a whereis of a key whose hash the index does not
	// hold: it cannot know which files have that content.
	ErrOtherBackend = errors.New("api: other backend")
	// ErrBusy: the daemon runs but takes no connection now: its listen
	// queue is full (EAGAIN at connect) or it holds too many (503). The
	// client retries with backoff before it returns this.
	ErrBusy = errors.New("api: annexd is busy")
	// ErrStarting: the daemon runs but does not serve its index yet
	// (503). The client retries with backoff before it returns this.
	ErrStarting = errors.New("api: annexd is still starting")
	// ErrClosed: the daemon closed the connection before its answer was
	// complete: it stopped, was killed, or restarted.
	ErrClosed = errors.New("api: annexd closed the connection")
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
		return e.Status >= 500 && e.Code != CodeBusy && e.Code != CodeStarting
	case ErrOtherBackend:
		return e.Code == CodeOtherBackend
	case ErrBusy:
		return e.Status == 503 && e.Code == CodeBusy
	case ErrStarting:
		return e.Code == CodeStarting
	}
	return false
}

// BusyError says that the daemon on Socket took no connection for Waited.
type BusyError struct {
	Socket string
	Waited time.Duration
	Err    error // the last refusal: EAGAIN at connect, or the 503
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("api: annexd on %s is busy: it took no connection for %v (%v)",
		e.Socket, e.Waited.Round(time.Millisecond), e.Err)
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

func (e *BusyError) Unwrap() error { return e.Err }

// closedError is ErrClosed with what happened next, if anything.
type closedError struct {
	when string // "before it answered", "in the middle of its answer"
	next error  // a failed redial, or nil
}

func (e *closedError) Error() string {
	if e.next != nil {
		return fmt.Sprintf("%v %s, and %v", ErrClosed, e.when, e.next)
	}
	return fmt.Sprintf("%v %s", ErrClosed, e.when)
}

func (e *closedError) Is(target error) bool { return target == ErrClosed }

func (e *closedError) Unwrap() error { return e.next }
