package dedup

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FIEMAP, from linux/fiemap.h and linux/fs.h.
const (
	fsIocFiemap      = 0xc020660b
	fiemapFlagSync   = 0x1
	extentLast       = 0x1
	extentUnknown    = 0x2
	extentDelalloc   = 0x4
	extentDataInline = 0x200
	extentShared     = 0x2000
	fiemapBatch      = 128
)

type fiemapHead struct {
	start, length uint64
	flags         uint32
	mapped        uint32
	count         uint32
	_             uint32
}

type fiemapExtent struct {
	logical, physical, length uint64
	_                         [2]uint64
	flags                     uint32
	_                         [3]uint32
}

var _ = [1]struct{}{}[unsafe.Sizeof(fiemapHead{})-32]
var _ = [1]struct{}{}[unsafe.Sizeof(fiemapExtent{})-56]

// extent is one mapped range of a file.
type extent struct {
	logical, physical, length uint64
	flags                     uint32
}

func (e extent) shared() bool { return e.flags&extentShared != 0 }

// unplaced reports an extent whose physical address means nothing: inline
// data, delayed allocation, or a location the file system will not tell.
func (e extent) unplaced() bool {
	return e.flags&(extentDataInline|extentDelalloc|extentUnknown) != 0
}

// fiemapBufs holds the buffers of FIEMAP calls: a survey makes one call
// a file.
var fiemapBufs = sync.Pool{New: func() any {
	b := make([]byte, unsafe.Sizeof(fiemapHead{})+fiemapBatch*unsafe.Sizeof(fiemapExtent{}))
	return &b
}}

// fiemap returns the extents of the open file fd over [0, size), after
// the kernel flushed its dirty pages. Holes are absent from the list.
func fiemap(fd int, size int64) ([]extent, error) {
	var out []extent
	bp := fiemapBufs.Get().(*[]byte)
	defer fiemapBufs.Put(bp)
	buf := *bp
	head := (*fiemapHead)(unsafe.Pointer(&buf[0]))
	exts := unsafe.Slice((*fiemapExtent)(unsafe.Pointer(&buf[unsafe.Sizeof(fiemapHead{})])), fiemapBatch)
	var start uint64
	for start < uint64(size) {
		*head = fiemapHead{start: start, length: uint64(size) - start, flags: fiemapFlagSync, count: fiemapBatch}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
			return nil, fmt.Errorf("FIEMAP: %w", e)
		}
		if head.mapped == 0 {
			break
		}
		for _, x := range exts[:head.mapped] {
			out = append(out, extent{logical: x.logical, physical: x.physical, length: x.length, flags: x.flags})
		}
		last := exts[head.mapped-1]
		if last.flags&extentLast != 0 {
			break
		}
		start = last.logical + last.length
	}
	return out, nil
}

// sharing compares a target's extents with its keeper's. same counts the
// bytes of the target that already are the keeper's blocks; exclusive the
// bytes that no other file shares, which deduplication would free.
// Unplaced extents count in neither.
func sharing(target, keeper []extent) (same, exclusive int64) {
	for _, t := range target {
		if t.unplaced() {
			continue
		}
		if !t.shared() {
			exclusive += int64(t.length)
			continue
		}
		same += overlapSame(t, keeper)
	}
	return same, exclusive
}

// overlapSame counts the bytes of t that the keeper maps to the same
// physical place at the same logical offset.
func overlapSame(t extent, keeper []extent) int64 {
	var n int64
	for _, k := range keeper {
		if k.unplaced() {
			continue
		}
		lo, hi := max(t.logical, k.logical), min(t.logical+t.length, k.logical+k.length)
		if lo >= hi || k.physical-k.logical != t.physical-t.logical {
			continue
		}
		n += int64(hi - lo)
	}
	return n
}

// placed sums the bytes of extents that have a physical place.
func placed(exts []extent) int64 {
	var n int64
	for _, e := range exts {
		if !e.unplaced() {
			n += int64(e.length)
		}
	}
	return n
}
