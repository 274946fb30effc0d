// Package xdg says where annexd's API socket lives when nothing else is
// configured, after the XDG base directory rules. It imports only the
// standard library, so that annexctl finds the socket without linking the
// config file's parser; the daemon's config uses the same rule.
package xdg

import (
	"os"
	"path/filepath"
	"strconv"
)

// SocketPath is $XDG_RUNTIME_DIR/annexd/annexd.sock. Without
// XDG_RUNTIME_DIR it is /run/user/UID/annexd/annexd.sock when /run/user/UID
// exists, else annexd-UID/annexd.sock under os.TempDir(). Whoever listens
// creates the directory.
func SocketPath() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		return filepath.Join(d, "annexd", "annexd.sock")
	}
	uid := strconv.Itoa(os.Getuid())
	if st, err := os.Stat(filepath.Join("/run/user", uid)); err == nil && st.IsDir() {
		return filepath.Join("/run/user", uid, "annexd", "annexd.sock")
	}
	return filepath.Join(os.TempDir(), "annexd-"+uid, "annexd.sock")
}
