// Package xdg says where annexd keeps its files when nothing else is
// configured: the index, the config file and the API socket, after the XDG
// base directory rules. It imports only the standard library, so that
// annexctl finds the socket without linking the config file's parser.
package xdg

import (
	"os"
	"path/filepath"
	"strconv"
)

// IndexPath is $XDG_STATE_HOME/annexd/index.db, falling back to
// ~/.local/state/annexd/index.db.
func IndexPath() string {
	return filepath.Join(dir("XDG_STATE_HOME", ".local/state"), "annexd", "index.db")
}

// ConfigPath is $XDG_CONFIG_HOME/annexd/annexd.toml, falling back to
// ~/.config/annexd/annexd.toml.
func ConfigPath() string {
	return filepath.Join(dir("XDG_CONFIG_HOME", ".config"), "annexd", "annexd.toml")
}

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

// dir returns $env when it is an absolute path (as the XDG rules demand),
// else ~/fallback. Without a home directory it uses the working directory.
func dir(env, fallback string) string {
	if d := os.Getenv(env); filepath.IsAbs(d) {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "."
	}
	return filepath.Join(home, fallback)
}
