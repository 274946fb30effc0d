package hasher

import (
	"io"
	"io/fs"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A small file none of whose pages is in the page cache is read with
// O_DIRECT: the disk's data goes straight into the caller's buffer, with
// no copy out of the page cache and no pages that an indexer, reading a
// tree once, would only push other data out of memory with. On the
// benchmark machine's virtual disk, in 10 alternated cold first scans of
// the corpus, it took 0.91× the wall time and 0.88× the CPU time, and a
// warm scan did not change (BENCHMARKS.md).
// A direct read sees what a buffered one would: the kernel writes back a
// range's dirty pages before reading it directly. Whatever does not fit
// the rules (a buffer or size the device cannot read directly, a file
// system without O_DIRECT, a read that ends anywhere but at the recorded
// size) is read the usual way, from the start.

// directAlign is the alignment of a direct read's buffer and length: the
// logical block size of every common disk divides it.
const directAlign = 4096

// noDirect holds the devices whose file systems refused O_DIRECT.
var noDirect sync.Map // uint64 → struct{}

// testHookDirect, set only by tests, runs after each direct read with
// its result, which it may replace.
var testHookDirect func(path string, n int, err error) (int, error)

// readCold reads f's before.Size bytes into the start of data with
// O_DIRECT when goesDirect says so, and reports whether it did; when it did
// not, f is open as before, at offset 0, for a buffered read (an error says
// it could not be made so). After a direct read O_DIRECT stays set: the
// caller only syncs, checks and closes f.
func (f *stableFile) readCold(o readOpts, data []byte) (bool, error) {
	size := f.before.Size
	want := (size + directAlign - 1) &^ (directAlign - 1)
	switch {
	case want > int64(cap(data)):
		return false, nil
	case uintptr(unsafe.Pointer(unsafe.SliceData(data)))%directAlign != 0:
		return false, nil // the allocator aligns these sizes; TestColdSmallFilesReadDirect checks it
	case !f.goesDirect(o):
		return false, nil
	}
	flags, err := unix.FcntlInt(uintptr(f.fd), unix.F_GETFL, 0)
	if err != nil {
		return false, nil
	}
	if _, err := unix.FcntlInt(uintptr(f.fd), unix.F_SETFL, flags|unix.O_DIRECT); err != nil {
		if err == unix.EINVAL {
			noDirect.Store(f.before.Dev, struct{}{})
		}
		return false, nil
	}
	n, err := readOnce(f.fd, data[:want])
	if testHookRead != nil {
		testHookRead(f.path)
	}
	if testHookDirect != nil {
		n, err = testHookDirect(f.path, n, err)
	}
	if err == nil && int64(n) == size {
		return true, nil // grown since its stat, it fails the check after reading
	}
	if err == unix.EINVAL {
		noDirect.Store(f.before.Dev, struct{}{}) // the device wants a larger alignment
	}
	return false, f.undoDirect(flags)
}

// goesDirect reports whether f is to be read with O_DIRECT: none of it is
// in the page cache, its ctime is older than the data window (a file
// written lately is most likely cached, and gets no look), and its device
// has not refused O_DIRECT. The look is the one makeDurable would take.
func (f *stableFile) goesDirect(o readOpts) bool {
	switch {
	case f.before.Size <= 0:
		return false
	case o.syncWindow >= 0 && mayHoldDirtyData(f.before.CtimeNs, time.Now().UnixNano(), o.window()):
		return false
	}
	if _, off := noDirect.Load(f.before.Dev); off {
		return false
	}
	cached, known := f.cachedPages()
	return known && cached == 0
}

// undoDirect turns O_DIRECT off again and rewinds f.
func (f *stableFile) undoDirect(flags int) error {
	if _, err := unix.FcntlInt(uintptr(f.fd), unix.F_SETFL, flags); err != nil {
		return &fs.PathError{Op: "fcntl", Path: f.path, Err: err}
	}
	if _, err := unix.Seek(f.fd, 0, io.SeekStart); err != nil {
		return &fs.PathError{Op: "seek", Path: f.path, Err: err}
	}
	return nil
}

// readOnce is one read(2), again when a signal interrupted it.
func readOnce(fd int, p []byte) (int, error) {
	for {
		n, err := unix.Read(fd, p)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// cachedPages returns how many of f's pages the page cache held when first
// asked, and keeps whether any was dirty or under writeback for makeDurable
// (see lookInCache); known is false where cachestat(2) cannot tell. One
// look a file: the answer stands until the check after reading.
func (f *stableFile) cachedPages() (cached uint64, known bool) {
	if f.cache != cacheUnseen {
		return f.pages, true
	}
	st, known := cachestat(f.fd)
	if !known {
		return 0, false
	}
	f.cache, f.pages = cacheClean, st.Cache
	if st.Dirty+st.Writeback > 0 {
		f.cache = cacheDirty
	}
	return st.Cache, true
}
