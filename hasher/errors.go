package hasher

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/annexd/annexd/fsstat"
)

// Errors returned by HashFile and Hasher.Hash.
var (
	// ErrChanged matches (errors.Is) a *ChangedError: the file changed while
	// it was hashed. Retry later; never record a digest for it.
	ErrChanged = errors.New("hasher: file changed while being hashed")
	// ErrNotRegular is returned for FIFOs, sockets, devices, symlinks and
	// directories, which are refused without being read.
	ErrNotRegular = errors.New("hasher: not a regular file")
	// ErrBackend is returned for a backend the hasher cannot compute.
	ErrBackend = errors.New("hasher: unsupported backend")
	// ErrClosed is returned by Hash after Close.
	ErrClosed = errors.New("hasher: closed")
	// ErrExternal is wrapped by failures of an external hasher program
	// (it failed to run, exited non-zero, or printed something unexpected).
	ErrExternal = errors.New("hasher: external hasher failed")
)

// ChangedError reports a file whose identity differed between two stats taken
// around reading it.
type ChangedError struct {
	Path   string
	Before fsstat.FileInfo // the identity before reading
	After  fsstat.FileInfo // the first identity seen that differed; zero when the path was gone
}

func (e *ChangedError) Error() string {
	return fmt.Sprintf("hasher: %s changed while being hashed (%s)", e.Path, describeChange(e.Before, e.After))
}

// Is makes errors.Is(err, ErrChanged) true.
func (e *ChangedError) Is(target error) bool { return target == ErrChanged }

func describeChange(a, b fsstat.FileInfo) string {
	switch {
	case b == fsstat.FileInfo{}:
		return "removed, or no longer reachable by its path"
	case a.Dev != b.Dev || a.Ino != b.Ino:
		return "replaced by another file"
	case a.Size != b.Size:
		return fmt.Sprintf("size %d → %d", a.Size, b.Size)
	case a.MtimeNs != b.MtimeNs:
		return "mtime changed"
	case a.CtimeNs != b.CtimeNs:
		return "ctime changed"
	case a.Mode.Type() != b.Mode.Type():
		return "file type changed"
	}
	return "short read"
}

// NotRegularError reports a path that is not a regular file; errors.Is(err,
// ErrNotRegular) matches it.
type NotRegularError struct {
	Path string
	Type string // "directory", "symlink", "FIFO", "socket", "character device", …
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("hasher: %s is a %s, not a regular file", e.Path, e.Type)
}

// Is makes errors.Is(err, ErrNotRegular) true.
func (e *NotRegularError) Is(target error) bool { return target == ErrNotRegular }

func notRegular(path string, fi fsstat.FileInfo) error {
	return &NotRegularError{Path: path, Type: typeName(fi)}
}

func typeName(fi fsstat.FileInfo) string {
	m := fi.Mode
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "non-regular file"
}
