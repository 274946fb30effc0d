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

// ErrSocketDir is returned when the socket's directory is not private to the
// daemon's user.
var ErrSocketDir = errors.New("config: socket directory not private")

// DefaultIndexPath is where the index lives by default (xdg.IndexPath).
func DefaultIndexPath() string { return xdg.IndexPath() }

// DefaultConfigPath is where the config file lives by default
// (xdg.ConfigPath).
func DefaultConfigPath() string { return xdg.ConfigPath() }

// DefaultSocketPath is where the API socket lives by default
// (xdg.SocketPath). The caller of PrepareSocketDir creates its directory.
func DefaultSocketPath() string { return xdg.SocketPath() }

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
