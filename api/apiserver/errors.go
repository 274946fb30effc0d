package apiserver

import "errors"

// Errors of New and Listen. Request errors use the api package's
// sentinels (api.ErrBadRequest, …).
var (
	// ErrConfig: the server configuration is invalid (message says how).
	ErrConfig = errors.New("apiserver: bad configuration")
	// ErrSocketInUse: another daemon answers on the socket.
	ErrSocketInUse = errors.New("apiserver: socket in use by a running daemon")
	// ErrUnsafeSocketDir: the socket's directory may be entered by others or
	// is not owned by the daemon's user.
	ErrUnsafeSocketDir = errors.New("apiserver: unsafe socket directory")
	// ErrListen: the socket or the TCP address cannot be bound (in use,
	// no permission).
	ErrListen = errors.New("apiserver: cannot listen")
)
