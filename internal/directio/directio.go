// Package directio reads files with O_DIRECT: the bytes come from the
// device into the caller's aligned buffer, past the page cache, and leave
// no pages behind.
//
// # Basics
//
// A direct read's offset, length and buffer must be aligned to the
// device's logical block size at least. Open sets O_DIRECT on an open file
// and picks the alignment: the largest of a page, what statx(2) reports
// (STATX_DIOALIGN) and the file system's block size. A device that still
// answers EINVAL gets twice the alignment, up to MaxAlign. The alignment
// that worked is kept per device, and so is a device that refuses direct
// reads (ErrRefused), so that the next file is not tried again.
//
// A direct read returns what a buffered read would. Before it, the kernel
// writes back the dirty pages of the range (kiocb_write_and_wait, called
// by the iomap and generic direct I/O paths), so data written and not yet
// on disk is read from the disk once it is there.
//
// # Caveats
//
// Some file systems take O_DIRECT and read through the page cache anyway:
// memory file systems (NoDevice), btrfs for compressed and inline extents,
// ext4 for inline data, data=journal, verity. Where the page cache held
// the data, such a read returns the cached bytes. BackingOf and
// ThroughCache tell a caller that must know where the bytes came from.
// What they cannot see: an overlay file system over a tmpfs (BackingOf
// names the overlay, and its direct reads reach memory), and a file
// system that takes O_DIRECT and serves it from a cache of its own
// without a known statfs type.
package directio

import (
	"errors"
	"math/bits"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Alignment bounds.
const (
	// MinAlign is the smallest alignment of a direct read, a page: every
	// common disk's logical block size divides it.
	MinAlign = 4096
	// MaxAlign is the largest alignment tried when a device refuses a
	// smaller one.
	MaxAlign = 1 << 20
)

// ErrRefused says the file cannot be read directly: its file system
// refuses O_DIRECT, the device refused every alignment, or statx says this
// file is kept where direct reads cannot reach it (ext4 inline data, say).
var ErrRefused = errors.New("directio: no direct reads of this file")

// devs holds what was learnt about each device: the alignment that
// worked, or 0 for a device that refuses direct reads.
var devs sync.Map // uint64 → int

// Refused reports whether the device dev refused direct reads before.
func Refused(dev uint64) bool {
	v, ok := devs.Load(dev)
	return ok && v.(int) == 0
}

// Forget drops what was learnt about dev: tests use it to start afresh.
func Forget(dev uint64) { devs.Delete(dev) }

// Buffer returns n bytes, rounded up to MinAlign, starting at an address
// aligned to MinAlign.
func Buffer(n int) []byte {
	n = Round(n, MinAlign)
	b := make([]byte, n+MinAlign)
	skip := (MinAlign - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%MinAlign)) % MinAlign
	return b[skip : skip+n : skip+n]
}

// HugePage is the size of a transparent huge page where the base page is
// 4 KiB (x86-64, arm64 with 4 KiB pages).
const HugePage = 2 << 20

// Buffers returns count buffers of size bytes each (rounded up to
// MinAlign), laid out one after the other in a block that starts on a
// HugePage boundary, which the kernel is asked to back with transparent
// huge pages (madvise MADV_HUGEPAGE; without them, or refused, the pages
// are ordinary ones). A direct read into physically contiguous memory pins
// one page where it pinned hundreds, and is one segment of a request: on
// the benchmark machine's virtio disk, whose requests take 254 segments, a
// read of 1 MiB into 4 KiB pages went out as two requests. Reading 1 GiB
// with O_DIRECT there cost 0.16 CPU-s in reads of 1 MiB into ordinary
// pages, 0.10 into huge pages, and 0.05 in reads of 2 MiB into huge pages,
// each of its own page (BENCHMARKS.md). The block is ordinary Go memory:
// the collector frees it once no buffer is referenced.
func Buffers(count, size int) [][]byte {
	size = Round(size, MinAlign)
	span := Round(count*size, HugePage)
	b := make([]byte, span+HugePage)
	skip := (HugePage - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%HugePage)) % HugePage
	block := b[skip : skip+span : skip+span]
	// Best effort: ordinary pages work the same. Memory the heap had
	// used before is mapped in ordinary pages already, which MADV_HUGEPAGE
	// leaves as they are: MADV_COLLAPSE (Linux 6.1) makes them huge now
	// (on a range none of whose pages is mapped yet it fails, and the
	// first touch maps a huge page).
	_ = unix.Madvise(block, unix.MADV_HUGEPAGE)
	_ = unix.Madvise(block, unix.MADV_COLLAPSE)
	bufs := make([][]byte, count)
	for i := range bufs {
		bufs[i] = block[i*size : (i+1)*size : (i+1)*size]
	}
	return bufs
}

// Aligned reports whether b starts at an address aligned to MinAlign.
func Aligned(b []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%MinAlign == 0
}

// Round rounds n up to a multiple of align, a power of two.
func Round(n, align int) int { return (n + align - 1) &^ (align - 1) }

// File is an open file with O_DIRECT set. It does not own the descriptor.
type File struct {
	fd    int
	dev   uint64
	align int
	flags int  // the status flags before Open, for Close
	vouch bool // statx reported the file's alignment
}

// Open sets O_DIRECT on fd, a regular file on the device dev (the key
// under which what is learnt about the device is kept). ErrRefused when
// the file cannot be read directly; fd is then as it was.
func Open(fd int, dev uint64) (*File, error) {
	learnt, known := devs.Load(dev)
	if known && learnt.(int) == 0 {
		return nil, ErrRefused
	}
	var sx unix.Statx_t
	err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &sx)
	reported := err == nil && sx.Mask&unix.STATX_DIOALIGN != 0
	switch {
	case reported && (sx.Dio_offset_align == 0 || sx.Dio_mem_align > MinAlign):
		return nil, ErrRefused // this file only; its device may serve others
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return nil, ErrRefused
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags|unix.O_DIRECT); err != nil {
		if err == unix.EINVAL {
			devs.Store(dev, 0)
		}
		return nil, ErrRefused
	}
	f := &File{fd: fd, dev: dev, flags: flags, vouch: reported}
	if known {
		f.align = learnt.(int)
	} else {
		f.align = firstAlign(fd, sx, reported)
	}
	return f, nil
}

// firstAlign is the alignment to try first on a device: the largest of a
// page, statx's offset alignment and the file system's block size (btrfs
// reports no alignment, and reads a misaligned request through the page
// cache rather than refuse it).
func firstAlign(fd int, sx unix.Statx_t, reported bool) int {
	a := MinAlign
	if reported {
		a = max(a, int(sx.Dio_offset_align))
	}
	var fs unix.Statfs_t
	if unix.Fstatfs(fd, &fs) == nil && fs.Bsize > 0 && fs.Bsize <= MaxAlign && bits.OnesCount64(uint64(fs.Bsize)) == 1 {
		a = max(a, int(fs.Bsize))
	}
	return min(powerOfTwo(a), MaxAlign)
}

func powerOfTwo(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// Vouched reports whether statx vouched for direct reads of this file
// (STATX_DIOALIGN, which ext4 and XFS report per file): the kernel then
// reads it from the device, never through the page cache. Without it, a
// file system may read parts of it through the page cache (ThroughCache).
func (f *File) Vouched() bool { return f.vouch }

// Align is the alignment f reads with: of an offset, a length, and the
// buffer's start (at least MinAlign).
func (f *File) Align() int { return f.align }

// testHookRead, set only by tests, runs after each pread(2) with its
// result, which it may replace.
var testHookRead func(align int, n int, err error) (int, error)

// ReadAt reads from offset off, a multiple of MaxAlign or of Align, into
// buf, which starts aligned. It asks for want bytes rounded up to Align
// and returns how many it read: fewer than want only at the end of the
// file, more when the file grew. On EINVAL it tries twice the alignment
// while buf holds the rounded length and off stays aligned. ErrRefused
// when no alignment worked, or when buf is too short for the one the
// device needs (a larger buffer may do then).
func (f *File) ReadAt(buf []byte, off int64, want int) (int, error) {
	if !Aligned(buf) {
		return 0, ErrRefused
	}
	for {
		n := Round(want, f.align)
		if n > len(buf) || off%int64(f.align) != 0 {
			return 0, ErrRefused
		}
		got, err := pread(f.fd, buf[:n], off)
		if testHookRead != nil {
			got, err = testHookRead(f.align, got, err)
		}
		if err != unix.EINVAL {
			if err == nil {
				f.learn(f.align)
			}
			return got, err
		}
		if f.align >= MaxAlign {
			f.learn(0) // the largest alignment failed: no direct reads there
			return 0, ErrRefused
		}
		f.align *= 2
	}
}

// learn keeps align (0: refused) as what works on f's device.
func (f *File) learn(align int) {
	if v, ok := devs.Load(f.dev); !ok || v.(int) != align {
		devs.Store(f.dev, align)
	}
}

// Close clears O_DIRECT again; the descriptor stays open.
func (f *File) Close() error {
	_, err := unix.FcntlInt(uintptr(f.fd), unix.F_SETFL, f.flags)
	return err
}

func pread(fd int, b []byte, off int64) (int, error) {
	for {
		n, err := unix.Pread(fd, b, off)
		if err != unix.EINTR {
			if n < 0 {
				n = 0
			}
			return n, err
		}
	}
}
