package durable

import "golang.org/x/sys/unix"

// Sync makes the data of the file open on fd durable with fdatasync(2),
// unless withEpochs is set and an epoch of its file system (device dev)
// covers the file, last changed at ctimeNs; synced reports that the
// fdatasync ran. A file system that cannot sync (EINVAL) or is read-only
// (EROFS) holds nothing a sync would write: that is no error. With
// withEpochs, every file synced counts towards the next epoch.
func Sync(fd int, dev uint64, ctimeNs int64, withEpochs bool) (synced bool, err error) {
	var e *epochs
	if withEpochs {
		e = epochsFor(fd, dev)
	}
	if e != nil && e.covered(fd, ctimeNs) {
		return false, nil
	}
	if err := fdatasync(fd); err != nil && err != unix.EINVAL && err != unix.EROFS {
		return false, err
	}
	if e != nil {
		e.noteSynced(fd)
	}
	return true, nil
}

// fdatasync is fdatasync(2), retried on EINTR.
func fdatasync(fd int) error {
	for {
		if err := unix.Fdatasync(fd); err != unix.EINTR {
			return err
		}
	}
}

// SyncDir syncs the directory fd, then asks the file system for fd's
// attributes, and returns the first error. XFS answers fsync of a
// directory with nothing in its log to force with success even once it
// has shut down (an I/O error, `xfs_io -x -c shutdown`), while the
// changes made just before were dropped with the log: its getattr checks
// for a shutdown, so a file system that cannot have kept them says so.
func SyncDir(fd int) error {
	if err := unix.Fsync(fd); err != nil {
		return err
	}
	var st unix.Stat_t
	return unix.Fstat(fd, &st)
}
