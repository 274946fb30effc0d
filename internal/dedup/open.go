package dedup

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
)

// resolve is how every path is opened: no symlink in any component, no
// magic link, nothing outside the root it starts from.
const resolve = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_BENEATH

// openPath opens an absolute path with openat2 from "/", so a symlink
// swapped into any component fails with ELOOP instead of being followed.
func openPath(path []byte, flags int) (*os.File, error) {
	if len(path) == 0 || path[0] != '/' {
		return nil, fmt.Errorf("%w: %q is not absolute", ErrPath, path)
	}
	rel := string(path[1:])
	if rel == "" {
		rel = "."
	}
	flags |= unix.O_CLOEXEC
	if flags&unix.O_PATH == 0 {
		flags |= unix.O_NOCTTY // openat2 takes no other flag with O_PATH
	}
	how := unix.OpenHow{Flags: uint64(flags), Resolve: resolve}
	fd, err := unix.Openat2(rootFD(), rel, &how)
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: string(path), Err: err}
	}
	return os.NewFile(uintptr(fd), string(path)), nil
}

// root is a descriptor of "/", opened once.
var root struct {
	fd  int
	err error
}

func init() {
	root.fd, root.err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

func rootFD() int {
	if root.err != nil {
		return -1 // openat2 then fails with EBADF, naming the path
	}
	return root.fd
}

// openFile opens a regular file for reading without blocking on a FIFO or
// a device that was swapped in, and stats the descriptor.
func openFile(path []byte) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	f, err := openPath(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK)
	if err != nil {
		return nil, st, err
	}
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, st, &os.PathError{Op: "fstat", Path: string(path), Err: err}
	}
	return f, st, nil
}

// matches reports whether the file's identity is the record's: same
// inode, size, mtime and ctime, and a regular file.
func matches(fi fsstat.FileInfo, r *store.Record) bool {
	return fi.IsRegular() && fsstat.OnFS(r.Dev, fi) &&
		fi.Same(fsstat.FileInfo{Dev: fi.Dev, Ino: r.Ino, Size: r.Size, MtimeNs: r.MtimeNs, CtimeNs: r.CtimeNs})
}

// sameRecord reports whether the index still holds what the plan saw.
func sameRecord(a, b *store.Record) bool {
	return a.Backend == b.Backend && bytes.Equal(a.Digest, b.Digest) && a.Size == b.Size &&
		a.MtimeNs == b.MtimeNs && a.CtimeNs == b.CtimeNs && a.Dev == b.Dev && a.Ino == b.Ino &&
		a.HashedAt == b.HashedAt && a.State == b.State
}

// skipFor turns an error of opening or acting on the file at path, on the
// file system dev (its record's), into a reason. A file gone with its file
// system (fsstat.Away) did not change: it is away.
func skipFor(err error, path []byte, dev uint64) Reason {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV) && isOpen(err):
		return SkipSymlink
	case errors.Is(err, os.ErrNotExist) && fsstat.Away(string(path), dev):
		return SkipAway
	case errors.Is(err, os.ErrNotExist):
		return SkipChanged
	case errors.Is(err, os.ErrPermission):
		return SkipPermission
	}
	return SkipError
}

// isOpen reports whether err came from openat2, where EXDEV means the path
// tried to leave the tree it resolves in.
func isOpen(err error) bool {
	var pe *os.PathError
	return errors.As(err, &pe) && pe.Op == "openat2"
}

// sameContent reports whether two records describe the same content of
// the same inode in the same state: a record made again after a ctime
// change, with a later HashedAt.
func sameContent(a, b *store.Record) bool {
	return a.Backend == b.Backend && bytes.Equal(a.Digest, b.Digest) && a.Size == b.Size &&
		a.MtimeNs == b.MtimeNs && a.CtimeNs == b.CtimeNs && a.Dev == b.Dev && a.Ino == b.Ino && a.State == b.State
}
