package indexfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrNoSpace: the file system holding the index is full. Package store
// returns it as its own ErrNoSpace.
var ErrNoSpace = errors.New("store: no space left for the index")

// Hint says what to do about err, a failed write of the index or of its
// directory: "" when there is nothing to say.
func Hint(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return " (the file system is full: free space or choose another --index)"
	case errors.Is(err, syscall.EROFS), errors.Is(err, fs.ErrPermission):
		return " (the directory is not writable: choose another --index or fix its permissions)"
	}
	return ""
}

// RemoveLeftovers removes the copies (named by CreateTemp's pattern) that
// a compaction or migration that crashed left next to the index. Only
// those make them, holding the index's lock, as the caller does now: none
// of them is in use.
func RemoveLeftovers(path, pattern string) {
	dir := filepath.Dir(path)
	entries, _ := os.ReadDir(dir)
	prefix := strings.TrimSuffix(pattern, "*")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) && e.Type().IsRegular() {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// CreateBeside creates an empty file named by CreateTemp's pattern in the
// directory of the file real, with real's permissions and, where the
// process may give it, real's owner: the copy renamed over real must stay
// usable by whoever used real.
func CreateBeside(real, pattern string) (string, error) {
	fi, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(real), pattern)
	if err != nil {
		return "", err
	}
	err = f.Chmod(fi.Mode().Perm())
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && err == nil {
		if uid, gid := int(st.Uid), int(st.Gid); uid != os.Geteuid() || gid != os.Getegid() {
			_ = f.Chown(uid, gid) // not permitted unless privileged: the copy is then ours
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// SyncDir syncs the directory dir, so that a rename in it lasts.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
