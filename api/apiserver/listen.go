package apiserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// checkSocketPath refuses abstract and otherwise unusable socket paths.
func checkSocketPath(path string) error {
	switch {
	case path == "":
		return fmt.Errorf("%w: empty socket path", ErrConfig)
	case strings.HasPrefix(path, "@") || strings.IndexByte(path, 0) >= 0:
		return fmt.Errorf("%w: abstract socket %q not allowed; use a file path", ErrConfig, path)
	case !filepath.IsAbs(path):
		return fmt.Errorf("%w: socket path %q is not absolute", ErrConfig, path)
	case len(path) >= len(unix.RawSockaddrUnix{}.Path):
		return fmt.Errorf("%w: socket path %q is longer than the %d bytes a unix socket allows",
			ErrConfig, path, len(unix.RawSockaddrUnix{}.Path)-1)
	}
	return nil
}

// prepareSocketDir creates dir (mode 0700) if needed and checks that only
// uid can enter it: owned by uid, a real directory, no group or other bits.
func prepareSocketDir(dir string, uid int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("apiserver: create socket directory: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("apiserver: socket directory %s: %w", dir, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%w: %s is not a directory (a symlink?); remove it or choose another socket path",
			ErrUnsafeSocketDir, dir)
	case int(st.Uid) != uid:
		return fmt.Errorf("%w: %s is owned by uid %d, not %d; remove it or choose another socket path",
			ErrUnsafeSocketDir, dir, st.Uid, uid)
	case st.Mode&0o077 != 0:
		return fmt.Errorf("%w: %s has mode %04o; run chmod 700 %s",
			ErrUnsafeSocketDir, dir, st.Mode&0o7777, dir)
	}
	return nil
}

// lockSocket takes an exclusive flock on path+".lock" so two daemons
// starting at once cannot both replace a stale socket. The lock is held for
// the returned file's lifetime.
func lockSocket(path string) (*os.File, error) {
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("apiserver: socket lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by another annexd", ErrSocketInUse, path)
		}
		return nil, fmt.Errorf("apiserver: socket lock %s.lock: %w", path, err)
	}
	return f, nil
}

// removeStaleSocket removes path if it is a socket nobody answers on. A
// socket that answers is ErrSocketInUse; a non-socket file is left alone.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("apiserver: socket %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%w: %s exists and is not a socket; remove it or choose another socket path",
			ErrConfig, path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: another annexd answers on %s", ErrSocketInUse, path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("apiserver: probe socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("apiserver: remove stale socket: %w", err)
	}
	return nil
}

// listenUnix prepares the directory, replaces a stale socket and listens on
// path with mode 0600. The returned lock file must stay open while serving.
func listenUnix(path string) (*net.UnixListener, *os.File, error) {
	if err := checkSocketPath(path); err != nil {
		return nil, nil, err
	}
	if err := prepareSocketDir(filepath.Dir(path), os.Geteuid()); err != nil {
		return nil, nil, err
	}
	lock, err := lockSocket(path)
	if err != nil {
		return nil, nil, err
	}
	if err := removeStaleSocket(path); err != nil {
		lock.Close()
		return nil, nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		lock.Close()
		return nil, nil, fmt.Errorf("%w on %s: %w", ErrListen, path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		lock.Close()
		return nil, nil, fmt.Errorf("apiserver: chmod socket: %w", err)
	}
	return ln, lock, nil
}

// checkLoopback refuses TCP addresses that are not loopback.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: tcp address %q: %v", ErrConfig, addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%w: tcp address %q is not a loopback address (use 127.0.0.1 or [::1])", ErrConfig, addr)
	}
	return nil
}
