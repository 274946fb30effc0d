package fsstat

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Timestamp granularity. Linux file systems with nanosecond timestamps
// advance them with the kernel's coarse clock: one tick, at most 10 ms.
// FAT and exFAT keep 2 s. Network and FUSE file systems get a safe second.
const (
	FineGranularity = 100 * time.Millisecond
	FATGranularity  = 2 * time.Second
	SafeGranularity = time.Second
)

// Magic numbers from statfs(2).
const (
	msdosMagic = 0x4d44
	exfatMagic = 0x2011bab0
	fuseMagic  = 0x65735546
	smbMagic   = 0x517b
	cifsMagic  = 0xff534d42
	nfsMagic   = 0x6969
)

// Granularity returns the timestamp granularity of the file system holding
// path, read with statfs, and from path's ctime: a file system that keeps
// whole seconds (ext4 with 128-byte inodes, ext3) gives every ctime no
// nanoseconds, which user space cannot set, and gets SafeGranularity. A
// fine file system whose ctime falls on a whole second (one in 10^9) is
// taken for a coarse one: a second's wait, never a missed write.
func Granularity(path string) (time.Duration, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	switch uint32(st.Type) {
	case msdosMagic, exfatMagic:
		return FATGranularity, nil
	case fuseMagic, smbMagic, cifsMagic, nfsMagic:
		return SafeGranularity, nil
	}
	var fi unix.Stat_t
	if err := unix.Lstat(path, &fi); err == nil && fi.Ctim.Nsec == 0 {
		return SafeGranularity, nil
	}
	return FineGranularity, nil
}

// Granularities caches Granularity per device. The zero value is ready.
type Granularities struct {
	m sync.Map // dev → time.Duration
}

// Of returns the granularity learned for dev, or FineGranularity.
func (g *Granularities) Of(dev uint64) time.Duration {
	if d, ok := g.m.Load(dev); ok {
		return d.(time.Duration)
	}
	return FineGranularity
}

// Learn records the granularity of the file system holding path, on
// device dev, the first time dev is met.
func (g *Granularities) Learn(dev uint64, path string) {
	if _, ok := g.m.Load(dev); ok {
		return
	}
	if d, err := Granularity(path); err == nil {
		g.m.Store(dev, d)
	}
}

// BornAfter reports whether the file at path, with inode ino, came into
// being after ctimeNs. A file that existed at ctimeNs was not born later
// (both come from the kernel's clock), so a file born after it is another
// file in a freed and reused inode. It reports true too when path no
// longer holds inode ino, and false when the file system keeps no birth
// times.
func BornAfter(path string, ino uint64, ctimeNs int64) bool {
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
