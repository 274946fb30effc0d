package audit

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/hasher/mbsha256"
	"github.com/annexd/annexd/internal/directio"
)

// readSize is the size of one read(2), and of one draw on the pacer: a
// huge page, where each buffer is one (directio.Buffers). Reads of 2 MiB
// into huge pages cost a third of the CPU of reads of 1 MiB into ordinary
// pages (BENCHMARKS.md). A run of many readers reads smallReadSize, so
// that its buffers stay within readBuffers.
const (
	readSize      = 2 << 20
	smallReadSize = 1 << 20
	readBuffers   = 16 << 20
)

// chunkFor is the read size of a run of readers with bufs buffers each.
func chunkFor(readers, bufs int) int {
	if readers*bufs*readSize <= readBuffers {
		return readSize
	}
	return smallReadSize
}

// partSize is how much of a file read through the page cache is looked at
// with mincore, read, and cleaned of the pages the audit brought in,
// before the next part.
const partSize = 64 << 20

var pageSize = int64(os.Getpagesize())

// Source says where the bytes of a read came from.
type Source uint8

// The sources. Only FromDevice verifies the disk; the others verify what
// the page cache holds, and are counted apart.
const (
	// FromDevice: read with O_DIRECT, or through the page cache while it
	// held none of the file.
	FromDevice Source = iota
	// NoDevice: the file system keeps its files in memory (tmpfs).
	NoDevice
	// NoDirect: the file system or its device refuses direct reads, or
	// answers them from a cache of its own (ZFS).
	NoDirect
	// Cached: the file system reads this file through the page cache
	// even with O_DIRECT (compressed or inline on btrfs, inline data on
	// ext4), and the page cache held some of it.
	Cached
	sourceEnd
)

var sourceNames = [sourceEnd]string{"device", "no_device", "no_direct", "cached"}

func (s Source) String() string {
	if s < sourceEnd {
		return sourceNames[s]
	}
	return "Source(?)"
}

// why says, for a log line or a finding, why a read came from the page
// cache only.
func (s Source) why() string {
	switch s {
	case NoDevice:
		return "the file system keeps its files in memory and has no device"
	case NoDirect:
		return "the file system does not read directly"
	case Cached:
		return "the file system reads this file through the page cache, which held some of it"
	}
	return "from the device"
}

// testHookDrop, set only by tests, hears of each range of pages dropped
// after a read through the page cache.
var testHookDrop func(firstPage, pages int64)

// testHookLanes, set only by tests, hears of each file read into the lanes.
var testHookLanes func(path string)

// testHookDirect, set only by tests, runs after each direct read.
var testHookDirect func(path string, off int64)

// reader reads whole files for an audit, from the device: with O_DIRECT,
// so the page cache neither serves the bytes nor keeps them. A file its
// file system will not read directly is read through the page cache:
// mincore(2) tells which pages were cached before each part, which says
// whether the bytes came from the device, and the pages the audit brought
// in are dropped afterwards (posix_fadvise DONTNEED), so that a pass over
// such a tree does not push the user's data out of memory. Reads are paced
// by a shared token bucket. A reader is used by one goroutine.
type reader struct {
	bufs  [][]byte // aligned for direct reads: one read, the others hashed
	chunk int      // the size of each, and of a read
	vec   []byte
	pace  *pacer // nil: full speed
	// lanes, when set, hash the direct reads of a SHA-256 file of more
	// than one read in a multi-buffer engine, beside the other readers'
	// files; sha256 says the file being read is one (readOnce sets it).
	lanes  *mbsha256.Lanes
	sha256 bool
	free   [][]byte
}

func newReader(pace *pacer, chunk int) *reader {
	return &reader{pace: pace, bufs: directio.Buffers(readerBufs, chunk), chunk: chunk}
}

// readerBufs is how many buffers a reader outside the lanes has.
const readerBufs = 3

// newLaneReader returns a full-speed reader whose SHA-256 files of more
// than one read go to l, with the buffers it hands the lanes (laneBufs);
// it reads the other files with them too.
func newLaneReader(l *mbsha256.Lanes, chunk int) *reader {
	return &reader{lanes: l, bufs: directio.Buffers(laneBufs, chunk), chunk: chunk}
}

// read hashes the regular file at path, whose lstat was before, into h.
// again says this is a second read: a file read through the page cache
// has its cached pages dropped first, so that the bytes come from the
// device where the kernel lets them go. It returns the digest, the lstat
// after and where the bytes came from, or the error; a file that is not
// the one before, or shorter, is a *hasher.ChangedError.
func (r *reader) read(ctx context.Context, path string, before fsstat.FileInfo, h hash.Hash, again bool) Read {
	fd, err := openNoFollow(path)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return Read{Err: &hasher.ChangedError{Path: path, Before: before, After: fsstat.FileInfo{Mode: fs.ModeSymlink}}}
		}
		return Read{Err: &fs.PathError{Op: "open", Path: path, Err: err}}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Read{Err: &fs.PathError{Op: "fstat", Path: path, Err: err}}
	}
	if now := fsstat.FromFstat(fd, &st); !now.IsRegular() || !now.Same(before) {
		return Read{Err: &hasher.ChangedError{Path: path, Before: before, After: now}}
	}
	src, sum, err := r.readDirect(ctx, fd, path, before, h)
	if errors.Is(err, directio.ErrRefused) {
		src, err = r.readCached(ctx, fd, path, before, h, src, again, &st)
	}
	if err != nil {
		return Read{Err: err, dev: st.Dev}
	}
	after, err := fsstat.Lstat(path)
	if err != nil {
		return Read{Err: err, dev: st.Dev}
	}
	if sum == nil {
		sum = h.Sum(nil)
	}
	return Read{Digest: sum, After: after, Source: src, dev: st.Dev}
}

// readDirect hashes the file open as fd into h with direct reads. It
// returns directio.ErrRefused, and how a read through the page cache is
// to count, when the file is not to be read directly: its file system
// has no device, refuses direct reads, or would read it through the page
// cache while that holds some of it. The digest it returns, when not
// nil, is the file's (hashed in the lanes); else h holds it.
func (r *reader) readDirect(ctx context.Context, fd int, path string, before fsstat.FileInfo, h hash.Hash) (Source, []byte, error) {
	switch b, _ := directio.BackingOf(fd); b {
	case directio.Memory:
		return NoDevice, nil, directio.ErrRefused
	case directio.OwnCache:
		return NoDirect, nil, directio.ErrRefused
	}
	df, err := directio.Open(fd, before.Dev)
	if err != nil {
		if directio.Refused(before.Dev) {
			return NoDirect, nil, err
		}
		return FromDevice, nil, err // this file only: read through a cache that holds none of it, it comes from the device
	}
	// Where statx does not vouch for direct reads of the file, the file
	// system may read parts of it through the page cache: then only a file
	// the cache holds none of comes from the device.
	cold := !df.Vouched() && cachedNone(fd)
	if !df.Vouched() && !cold {
		if through, _ := directio.ThroughCache(fd); through {
			return FromDevice, nil, offDirect(df, path)
		}
	}
	h.Reset()
	var sum []byte
	if src, s, err := r.readDirectly(ctx, df, fd, path, before, h); errors.Is(err, directio.ErrRefused) {
		return src, nil, offDirect(df, path)
	} else if err != nil {
		return src, nil, err
	} else {
		sum = s
	}
	if cold && !cachedNone(fd) {
		// The file system read it through the page cache after all
		// (compressed, inline): from the device, as nothing was cached.
		// The pages it left are the audit's.
		_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
	}
	return FromDevice, sum, nil
}

// offDirect turns O_DIRECT off again for a read through the page cache,
// and returns directio.ErrRefused, or the error that kept it on. (After a
// direct read the descriptor is closed with O_DIRECT set.)
func offDirect(df *directio.File, path string) error {
	if err := df.Close(); err != nil {
		return &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return directio.ErrRefused
}

// readDirectly reads the file open as df into h. A file of more than one
// read is hashed on another goroutine while this thread reads on (in the
// lanes when the reader has them and the file is SHA-256, else on a
// goroutine of its own): the reads stay on the reader's thread, in the
// idle I/O class, and the disk works while the CPU hashes. A digest
// returned is the file's, hashed in the lanes.
func (r *reader) readDirectly(ctx context.Context, df *directio.File, fd int, path string, before fsstat.FileInfo, h hash.Hash) (Source, []byte, error) {
	if r.lanes != nil && r.sha256 && before.Size > int64(r.chunk) {
		return r.readLanes(ctx, df, fd, path, before)
	}
	free := make(chan []byte, len(r.bufs))
	for _, b := range r.bufs {
		free <- b
	}
	get := func() []byte { return <-free }
	put := func(b []byte, _ bool) { h.Write(b); free <- b[:cap(b)] }
	var full chan []byte
	done := make(chan struct{})
	if before.Size > int64(r.chunk) {
		full = make(chan []byte, len(r.bufs))
		go func() {
			defer close(done)
			for b := range full {
				h.Write(b)
				free <- b[:cap(b)]
			}
		}()
		put = func(b []byte, _ bool) { full <- b }
	}
	src, err := r.readChunks(ctx, df, fd, path, before, get, put)
	if full != nil {
		close(full)
		<-done
	}
	return src, nil, err
}

// laneBufs is how many buffers a reader of the lanes has: one read while
// the lanes hold the other. A full-speed run has a reader a lane, and
// the buffers are most of its memory.
const laneBufs = 2

// readLanes reads the file open as df chunk by chunk into a stream of the
// lanes, which hash each chunk where it lies and hand its buffer back.
func (r *reader) readLanes(ctx context.Context, df *directio.File, fd int, path string, before fsstat.FileInfo) (Source, []byte, error) {
	if testHookLanes != nil {
		testHookLanes(path)
	}
	s := r.lanes.Open(len(r.bufs))
	r.free = append(r.free[:0], r.bufs...)
	get := func() []byte {
		if len(r.free) == 0 {
			r.free = append(r.free, <-s.Back())
		}
		b := r.free[len(r.free)-1]
		r.free = r.free[:len(r.free)-1]
		return b[:cap(b)]
	}
	src, err := r.readChunks(ctx, df, fd, path, before, get, s.Put)
	if err != nil {
		s.Abort() // the engine is done with the buffers
		return src, nil, err
	}
	res := s.Sum()
	if res.Err != nil || res.Size != before.Size {
		return src, nil, fmt.Errorf("audit: hashing %s in the lanes: %d bytes of %d, %w", path, res.Size, before.Size, res.Err)
	}
	return src, res.Sum[:], nil
}

// readChunks reads the file open as df chunk by chunk into the buffers
// get gives and hands each to put (last: the file's final chunk).
func (r *reader) readChunks(ctx context.Context, df *directio.File, fd int, path string, before fsstat.FileInfo,
	get func() []byte, put func(b []byte, last bool)) (Source, error) {
	for off := int64(0); off < before.Size; {
		if err := ctx.Err(); err != nil {
			return FromDevice, err
		}
		want := min(int64(r.chunk), before.Size-off)
		if err := r.pace.wait(ctx, int(want)); err != nil {
			return FromDevice, err
		}
		b := get()
		began := time.Now()
		n, err := df.ReadAt(b, off, int(want))
		r.pace.read(time.Since(began))
		if testHookDirect != nil {
			testHookDirect(path, off)
		}
		switch {
		case errors.Is(err, directio.ErrRefused):
			return NoDirect, err
		case err != nil:
			return FromDevice, &fs.PathError{Op: "read", Path: path, Err: err}
		case int64(n) < want:
			// Shorter than its size said: it changed. (A longer one
			// shows in the lstat after.)
			after, _ := fsstat.Fstat(fd)
			return FromDevice, &hasher.ChangedError{Path: path, Before: before, After: after}
		}
		off += want
		put(b[:want], off == before.Size)
	}
	return FromDevice, nil
}

// cachedNone reports whether cachestat(2) says the page cache holds none
// of fd's pages; false when it cannot tell.
func cachedNone(fd int) bool {
	var cs unix.Cachestat_t
	return unix.Cachestat(uint(fd), &unix.CachestatRange{}, &cs, 0) == nil && cs.Cache == 0
}

// readCached hashes the file open as fd into h through the page cache. src
// is where the bytes come from when the page cache held none of them:
// FromDevice on a file system with a device, which mincore then tells
// apart from Cached. The pages the audit brought in are dropped again.
func (r *reader) readCached(ctx context.Context, fd int, path string, before fsstat.FileInfo, h hash.Hash, src Source, again bool, st *unix.Stat_t) (Source, error) {
	track := src != NoDevice && cacheVisible(st, path)
	if again && src != NoDevice {
		_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
	}
	if before.Size > int64(r.chunk) {
		_ = unix.Fadvise(fd, 0, 0, unix.FADV_SEQUENTIAL) // a larger kernel read-ahead
	}
	h.Reset()
	for off := int64(0); off < before.Size; off += partSize {
		n := min(partSize, before.Size-off)
		var resident []byte
		if track {
			resident = r.resident(fd, off, n)
		}
		if src == FromDevice && (resident == nil || anyResident(resident)) {
			src = Cached
		}
		if err := r.readPart(ctx, fd, path, before, off, n, h); err != nil {
			return src, err
		}
		dropFresh(fd, off, n, resident)
	}
	return src, nil
}

// resident returns which pages of [off, off+n) are cached now; nil when
// that is not known.
func (r *reader) resident(fd int, off, n int64) []byte {
	pages := (n + pageSize - 1) / pageSize
	if int64(cap(r.vec)) < pages {
		r.vec = make([]byte, pages)
	}
	vec := r.vec[:pages]
	if err := mincore(fd, off, n, vec); err != nil {
		return nil
	}
	return vec
}

func anyResident(vec []byte) bool {
	for _, v := range vec {
		if v&1 != 0 {
			return true
		}
	}
	return false
}

// readPart reads [off, off+n) of fd into h, paced.
func (r *reader) readPart(ctx context.Context, fd int, path string, before fsstat.FileInfo, off, n int64, h hash.Hash) error {
	for done := int64(0); done < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := r.bufs[0][:min(int64(r.chunk), n-done)]
		if err := r.pace.wait(ctx, len(b)); err != nil {
			return err
		}
		began := time.Now()
		m, err := pread(fd, b, off+done)
		r.pace.read(time.Since(began))
		switch {
		case err != nil:
			return &fs.PathError{Op: "read", Path: path, Err: err}
		case m == 0:
			// Shorter than its size said: it changed.
			after, _ := fsstat.Fstat(fd)
			return &hasher.ChangedError{Path: path, Before: before, After: after}
		}
		h.Write(b[:m])
		done += int64(m)
	}
	return nil
}

// dropFresh drops the pages of [off, off+n) that resident says were not
// cached before the audit read them. Without resident nothing is known,
// and nothing is dropped: the audit never evicts what it cannot see.
func dropFresh(fd int, off, n int64, resident []byte) {
	if resident == nil {
		return
	}
	for i := 0; i < len(resident); {
		if resident[i]&1 != 0 {
			i++
			continue
		}
		j := i
		for j < len(resident) && resident[j]&1 == 0 {
			j++
		}
		_ = unix.Fadvise(fd, off+int64(i)*pageSize, int64(j-i)*pageSize, unix.FADV_DONTNEED)
		if testHookDrop != nil {
			testHookDrop(off/pageSize+int64(i), int64(j-i))
		}
		i = j
	}
}

// mincore fills vec with the page-cache residency of [off, off+n) of fd
// (bit 0 of each byte set for a cached page), through a mapping that is
// never touched.
func mincore(fd int, off, n int64, vec []byte) error {
	mem, err := unix.Mmap(fd, off, int(n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(n), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return e
	}
	return nil
}

// cacheVisible reports whether mincore tells this process about the page
// cache of the file: Linux answers only for files the caller owns or
// could open for writing (CAP_FOWNER counts as owning). For others it
// reports pages as absent, and dropping them would evict the user's.
func cacheVisible(st *unix.Stat_t, path string) bool {
	euid := uint32(os.Geteuid())
	return euid == 0 || st.Uid == euid || unix.Faccessat(unix.AT_FDCWD, path, unix.W_OK, unix.AT_EACCESS) == nil
}

func openNoFollow(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func pread(fd int, b []byte, off int64) (int, error) {
	for {
		n, err := unix.Pread(fd, b, off)
		if err != unix.EINTR {
			if err == nil && n < 0 {
				return 0, io.ErrUnexpectedEOF
			}
			return n, err
		}
	}
}
