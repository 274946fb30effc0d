package api

import (
	"fmt"
	"path/filepath"

	"github.com/annexd/annexd/internal/xdg"
)

// SocketName is the file name of the socket inside its directory.
const SocketName = "annexd.sock"

// DefaultSocketPath returns where annexd listens and annexctl looks when no
// socket is configured:
//
//  1. $XDG_RUNTIME_DIR/annexd/annexd.sock when XDG_RUNTIME_DIR is set to an
//     absolute path;
//  2. else /run/user/UID/annexd/annexd.sock when /run/user/UID exists;
//  3. else annexd-UID/annexd.sock under os.TempDir().
//
// The rule itself lives in package xdg, which the daemon's configuration
// uses too, so the daemon's default, the server and the client agree.
func DefaultSocketPath() (string, error) {
	p := xdg.SocketPath()
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: default socket path %q is not absolute; set XDG_RUNTIME_DIR or --socket", ErrConfig, p)
	}
	return p, nil
}
