package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/annexd/annexd/internal/xdg"
)

// Errors about default paths.
var (
	// ErrSocketDir: the socket's directory is not private to the daemon's user.
	ErrSocketDir = errors.New("config: socket directory not private")
	// ErrNoHome: neither the XDG variable nor a home directory gives a default.
	ErrNoHome = errors.New("config: no home directory")
)

// DefaultIndexPath is $XDG_STATE_HOME/annexd/index.db, falling back to
// ~/.local/state/annexd/index.db. Without either it fails with ErrNoHome:
// an index must not land wherever the daemon happened to start.
func DefaultIndexPath() (string, error) {
	d, err := xdgDir("XDG_STATE_HOME", ".local/state")
	if err != nil {
		return "", fmt.Errorf("%w for the default index; give --index, or set $XDG_STATE_HOME", err)
	}
	return filepath.Join(d, "annexd", "index.db"), nil
}

// DefaultConfigPath is $XDG_CONFIG_HOME/annexd/annexd.toml, falling back to
// ~/.config/annexd/annexd.toml; without either, annexd.toml in the
// working directory.
func DefaultConfigPath() string {
	d, err := xdgDir("XDG_CONFIG_HOME", ".config")
	if err != nil {
		return "annexd.toml"
	}
	return filepath.Join(d, "annexd", "annexd.toml")
}

// DefaultSocketPath is where the API socket lives by default
// (xdg.SocketPath). The caller of PrepareSocketDir creates its directory.
func DefaultSocketPath() string { return xdg.SocketPath() }

// xdgDir returns $env when it is an absolute path (as the XDG spec demands),
// else ~/fallback.
func xdgDir(env, fallback string) (string, error) {
	if d := os.Getenv(env); filepath.IsAbs(d) {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoHome, err)
	}
	return filepath.Join(home, fallback), nil
}

// PrepareSocketDir creates the socket's directory with mode 0700 when it is
// missing and checks that it is a directory owned by this user that nobody
// else can enter, so that the socket inside is private even before its own
// mode is set.
func PrepareSocketDir(socket string) error {
	dir := filepath.Dir(socket)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("config: socket directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("config: socket directory: %w", err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("config: socket directory: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrSocketDir, dir)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return fmt.Errorf("%w: %s is owned by uid %d, not %d; remove it or set socket in the config", ErrSocketDir, dir, sys.Uid, os.Getuid())
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %v; run chmod 700 %s", ErrSocketDir, dir, st.Mode().Perm(), dir)
	}
	return nil
}
