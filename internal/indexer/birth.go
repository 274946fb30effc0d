package indexer

import (
	"time"

	"golang.org/x/sys/unix"
)

// bornAfter reports whether the file at path, with inode ino, came into
// being after ctimeNs, the ctime a record saw when it hashed a file with
// that inode. The hashed file existed then and its birth time is not later
// than its ctime (both come from the kernel's clock), so a file born after
// it is another file in a freed and reused inode. It reports true too when
// path no longer holds inode ino, and false when the file system does not
// keep birth times.
func bornAfter(path string, ino uint64, ctimeNs int64) bool {
	var stx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO|unix.STATX_BTIME, &stx)
	if err != nil || stx.Ino != ino {
		return true
	}
	if stx.Mask&unix.STATX_BTIME == 0 {
		return false
	}
	born := stx.Btime.Sec*int64(time.Second) + int64(stx.Btime.Nsec)
	return born > ctimeNs
}
