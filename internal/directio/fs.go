package directio

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Backing is what stands behind a file system's files.
type Backing uint8

// The backings.
const (
	// Disk: a device, or a file system not known to be otherwise. A
	// direct read reaches it.
	Disk Backing = iota
	// Memory: the file system keeps its files in memory (tmpfs, ramfs).
	// There is no device; a direct read copies from the page cache.
	Memory
	// OwnCache: the file system may answer a direct read from a cache of
	// its own (ZFS before 2.3 takes O_DIRECT and ignores it; its ARC
	// holds what was read). Its own scrub verifies its disks.
	OwnCache
)

// Statfs f_type values of the file systems that are not Disk.
var backings = map[int64]struct {
	b    Backing
	name string
}{
	unix.TMPFS_MAGIC:     {Memory, "tmpfs"},
	unix.RAMFS_MAGIC:     {Memory, "ramfs"},
	unix.HUGETLBFS_MAGIC: {Memory, "hugetlbfs"},
	0x2fc12fc1:           {OwnCache, "zfs"},
}

// BackingOf returns what stands behind the file system of fd, and the
// file system's name when it is not Disk.
func BackingOf(fd int) (Backing, string) {
	var fs unix.Statfs_t
	if unix.Fstatfs(fd, &fs) != nil {
		return Disk, ""
	}
	if b, ok := backings[int64(fs.Type)]; ok {
		return b.b, b.name
	}
	return Disk, ""
}

// FIEMAP (linux/fiemap.h).
const (
	fsIocFiemap   = 0xC020660B
	fiemapHeader  = 32
	fiemapExtent  = 56
	fiemapBatch   = 32
	extentLast    = 0x1
	extentEncoded = 0x8
	extentNotAlig = 0x100
	extentInline  = 0x200
	extentTail    = 0x400
	// throughCache are the extent flags of data a direct read cannot
	// reach where it lies: compressed, inline in metadata, packed into a
	// tail. The kernel reads them through the page cache.
	throughCache = extentEncoded | extentNotAlig | extentInline | extentTail
)

// ThroughCache reports whether any extent of fd's file is kept where a
// direct read cannot reach it (FIEMAP says compressed, inline or packed),
// so that the kernel reads it through the page cache even with O_DIRECT
// set. known is false when the file system has no FIEMAP.
func ThroughCache(fd int) (through, known bool) {
	buf := make([]byte, fiemapHeader+fiemapBatch*fiemapExtent)
	le := binary.LittleEndian
	for start := uint64(0); ; {
		clear(buf)
		le.PutUint64(buf[0:], start)
		le.PutUint64(buf[8:], ^uint64(0)-start) // fm_length: to the end
		le.PutUint32(buf[24:], fiemapBatch)     // fm_extent_count
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
			return false, false
		}
		n := int(le.Uint32(buf[20:])) // fm_mapped_extents
		if n == 0 {
			return false, true
		}
		for i := range n {
			ext := buf[fiemapHeader+i*fiemapExtent:]
			flags := le.Uint32(ext[40:])
			if flags&throughCache != 0 {
				return true, true
			}
			if flags&extentLast != 0 {
				return false, true
			}
			start = le.Uint64(ext[0:]) + le.Uint64(ext[16:]) // fe_logical + fe_length
		}
	}
}
