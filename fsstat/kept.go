package fsstat

import (
	"time"

	"golang.org/x/sys/unix"
)

// # Kept writes
//
// A process that dies leaves its writes in the page cache, and the kernel
// writes them back all the same: only the end of the file system's mount
// loses them (a power cut, a restart of the machine, a disk pulled out or
// shut down). A MountMark names the mount a file system was met on, so that
// a later process of the same boot can ask whether that mount is still up
// and its writes still reach the disk (Kept).

// MountMark names one mount for the rest of a boot.
type MountMark struct {
	ID    uint64 // the mount's id, never reused in a boot (statx STATX_MNT_ID_UNIQUE, Linux 6.8)
	Point string // where it is mounted
}

// MarkOf returns the mark of the mount on which this process last met file
// system id; false when it met none, or the kernel has no unique mount ids.
func MarkOf(id uint64) (MountMark, bool) {
	fs, ok := Describe(id)
	if !ok || fs.Mount.ID == 0 || fs.Mount.Point == "" {
		return MountMark{}, false
	}
	return fs.Mount, true
}

// Kept reports whether every write made to the file system of m while its
// mount was up is still in the page cache or on the disk: the mount is
// still at its point with nothing mounted over it, and syncfs(2) forces its
// file system's writes to disk without an error. syncfs reports a write-back
// error that no one was told of yet, and fails on a file system shut down
// (XFS after an I/O error) whose mount stays. Unique mount ids start again
// at each boot: the caller must know that m was taken in this one. Kept
// waits up to timeout for syncfs (a network file system may hang); past it,
// false.
func Kept(m MountMark, timeout time.Duration) bool {
	if m.ID == 0 || m.Point == "" {
		return false
	}
	fd, err := unix.Open(m.Point, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	if mountUnique(fd) != m.ID {
		unix.Close(fd)
		return false
	}
	done := make(chan error, 1)
	go func() {
		defer unix.Close(fd)
		done <- unix.Syncfs(fd)
	}()
	select {
	case err := <-done:
		return err == nil
	case <-time.After(timeout):
		return false
	}
}

// markOf is the mark of the mount that holds fd, found in mounts by the
// mount id that statx gives (the reusable one that mountinfo lists).
func markOf(fd int, mounts []Mount) MountMark {
	unique := mountUnique(fd)
	if unique == 0 {
		return MountMark{}
	}
	var sx unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &sx) != nil || sx.Mask&unix.STATX_MNT_ID == 0 {
		return MountMark{}
	}
	for _, m := range mounts {
		if uint64(m.ID) == sx.Mnt_id {
			return MountMark{ID: unique, Point: m.Point}
		}
	}
	return MountMark{}
}
