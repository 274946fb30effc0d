// Package fsstat is the identity of a file's state as the index sees it:
// (file system, ino, size, mtime_ns, ctime_ns) plus the file type, read
// with lstat or fstat, never following symlinks.
//
// Two FileInfo values that are Same describe a file whose content the index
// may assume unchanged; any difference means the content may have changed.
// The file system is named by an id that survives reboots and renumbered
// devices (fsid.go), not by st_dev. The package also holds the file-system
// probes the index needs: the mount table and its changes, the timestamp
// granularity of a file system and a file's birth time.
package fsstat

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// FileInfo is the part of a stat result the index relies on.
type FileInfo struct {
	Dev     uint64 // the file system's id (see fsid.go), not st_dev
	RawDev  uint64 // st_dev: compare it only with another st_dev of now
	Ino     uint64
	Size    int64
	MtimeNs int64
	CtimeNs int64
	Mode    fs.FileMode // type bits and permissions, as io/fs reports them
	Nlink   uint64      // hard links to the inode
}

// Same reports whether a and b describe the same file in the same state.
func (a FileInfo) Same(b FileInfo) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Size == b.Size &&
		a.MtimeNs == b.MtimeNs && a.CtimeNs == b.CtimeNs
}

// IsRegular reports whether the file is a regular file.
func (a FileInfo) IsRegular() bool { return a.Mode.IsRegular() }

// IsDir reports whether the file is a directory.
func (a FileInfo) IsDir() bool { return a.Mode.IsDir() }

// Lstat stats path without following a final symlink.
func Lstat(path string) (FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return FileInfo{}, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	return fromStat(&st, idOf(uint64(st.Dev), pathOpener(path, &st))), nil
}

// Fstat stats an open file descriptor.
func Fstat(fd int) (FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return FileInfo{}, err
	}
	return fromStat(&st, idOf(uint64(st.Dev), fdOpener(fd, &st))), nil
}

// FromStat converts a raw stat result. The file system is found through
// the mount table the first time its device is met, which fails for a
// btrfs subvolume: a caller with the file open, or its directory, says so
// with FromFstat or FromStatAt.
func FromStat(st *unix.Stat_t) FileInfo {
	return fromStat(st, idOf(uint64(st.Dev), nil))
}

// FromFstat converts the fstat result of the open descriptor fd.
func FromFstat(fd int, st *unix.Stat_t) FileInfo {
	return fromStat(st, idOf(uint64(st.Dev), fdOpener(fd, st)))
}

// FromStatAt converts the stat result of name in the directory open as
// dirfd. name may be "" when st is not a directory's: such a file is on
// its directory's file system.
func FromStatAt(dirfd int, name string, st *unix.Stat_t) FileInfo {
	return fromStat(st, idOf(uint64(st.Dev), atOpener(dirfd, name, st)))
}

func fromStat(st *unix.Stat_t, id uint64) FileInfo {
	return FileInfo{
		Dev:     id,
		RawDev:  uint64(st.Dev),
		Ino:     uint64(st.Ino),
		Size:    st.Size,
		MtimeNs: st.Mtim.Nano(),
		CtimeNs: st.Ctim.Nano(),
		Mode:    modeOf(st.Mode),
		Nlink:   uint64(st.Nlink),
	}
}

func modeOf(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	case unix.S_IFREG:
	default:
		// A type this code does not know is never taken for a regular file.
		mode |= fs.ModeIrregular
	}
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// LstatBeneath stats the file at rel under the directory open as dirfd,
// following no symlink in any component (openat2 RESOLVE_NO_SYMLINKS and
// RESOLVE_BENEATH): a path that reaches its file through a symlink fails
// with ELOOP, as a walk that does not follow symlinks would never reach it.
// Where openat2 is missing (before Linux 5.6) or refused (a seccomp filter
// answering EPERM) it falls back to lstat of dir/rel, which follows
// symlinks in the directories.
func LstatBeneath(dirfd int, dir, rel string) (FileInfo, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_BENEATH}
	fd, err := unix.Openat2(dirfd, rel, &how)
	if err == unix.ENOSYS || err == unix.EPERM || err == unix.EINVAL {
		return Lstat(dir + "/" + rel)
	}
	if err != nil {
		return FileInfo{}, &fs.PathError{Op: "openat2", Path: dir + "/" + rel, Err: err}
	}
	defer unix.Close(fd)
	return Fstat(fd)
}
