package hasher

import (
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The terms of the data window. The kernel writes dirty data back once it
// has been dirty for dirty_expire_centisecs, at the next flusher wakeup
// (every dirty_writeback_centisecs); the journal then commits what makes it
// readable, and flushes the disk's cache, within its own interval (XFS's
// log worker every xfssyncd_centisecs, 30 s by default; ext4 every 5 s).
const (
	// MinDataWindow is the shortest data window, whatever the sysctls say.
	MinDataWindow = time.Minute
	// journalAllowance is the journal's commit interval when XFS does not
	// say it (its default; ext4's is shorter).
	journalAllowance = 30 * time.Second
)

// NoWriteback is the data window when the kernel does not write dirty
// data back on its own: every file may hold data that is not on disk.
const NoWriteback = time.Duration(math.MaxInt64)

// DataWindow is how long after a write its data may still be only in the
// page cache: the kernel's dirty expiry, its writeback interval and the
// journal's commit interval, at least MinDataWindow. It is NoWriteback when
// periodic writeback is off (dirty_writeback_centisecs 0, or laptop_mode).
// The sysctls are read once.
func DataWindow() time.Duration {
	dataWindowOnce.Do(func() {
		vm := func(name string) int64 { return readSysctl("/proc/sys/vm/" + name) }
		dataWindow = dataWindowFrom(vm("dirty_expire_centisecs"), vm("dirty_writeback_centisecs"),
			vm("laptop_mode"), readSysctl("/proc/sys/fs/xfs/xfssyncd_centisecs"))
	})
	return dataWindow
}

var (
	dataWindowOnce sync.Once
	dataWindow     time.Duration
)

// dataWindowFrom derives the data window from the sysctls (centiseconds;
// -1 for one that could not be read).
func dataWindowFrom(expireCs, writebackCs, laptopMode, xfsSyncCs int64) time.Duration {
	const cs = 10 * time.Millisecond
	if writebackCs == 0 || laptopMode > 0 {
		return NoWriteback
	}
	if expireCs < 0 {
		expireCs = 3000 // the kernel's default
	}
	if writebackCs < 0 {
		writebackCs = 500
	}
	journal := max(journalAllowance, time.Duration(xfsSyncCs)*cs)
	return max(MinDataWindow, time.Duration(expireCs+writebackCs)*cs+journal)
}

func readSysctl(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v < 0 {
		return -1
	}
	return v
}

// window is the data window of o: DataWindow() unless o sets one.
func (o readOpts) window() time.Duration {
	if o.syncWindow != 0 {
		return o.syncWindow
	}
	return DataWindow()
}

// mayHoldDirtyData reports whether a file whose ctime is ctimeNs may, at
// nowNs, hold written data that is not on disk yet. Every write(2) and
// mmap write fault sets ctime to the time of the write, and nothing moves
// ctime back, so a file whose ctime is older than the window was last
// written longer ago than writeback takes. A ctime in the future (a clock
// set back) proves nothing.
func mayHoldDirtyData(ctimeNs, nowNs int64, window time.Duration) bool {
	return window == NoWriteback || nowNs-ctimeNs < int64(window)
}

// testHookSync, set only by tests, runs after a file's data was synced.
var testHookSync func(path string)

// makeDurable syncs the data of a file that may hold some that is not on
// disk yet, so that what was read from the page cache is what the disk
// holds: a file whose ctime is within the window, or one the page cache
// says is dirty or under writeback although it is older (writeback that
// lags behind, a device that stalls). A file that an epoch of its file
// system covers needs no sync. syncWindow < 0 never syncs.
func (f *stableFile) makeDurable(o readOpts) error {
	if o.syncWindow < 0 {
		return nil
	}
	window := o.window()
	if !mayHoldDirtyData(f.before.CtimeNs, time.Now().UnixNano(), window) && !f.dirtyInCache() {
		return nil
	}
	var e *epochs
	if !o.noEpochs {
		e = epochsFor(f.fd, f.before.Dev)
	}
	if e != nil && e.covered(f.fd, f.before.CtimeNs) {
		return nil
	}
	for {
		err := unix.Fdatasync(f.fd)
		switch err {
		case unix.EINTR:
			continue
		case nil, unix.EINVAL, unix.EROFS:
			// EINVAL, EROFS: a file system that cannot sync (or is
			// read-only) holds nothing a sync would write.
			if testHookSync != nil {
				testHookSync(f.path)
			}
			if e != nil {
				e.noteSynced(f.fd)
			}
			return nil
		}
		return &fs.PathError{Op: "fdatasync", Path: f.path, Err: err}
	}
}

// noCachestat is set once the kernel turned cachestat(2) down for good
// (before Linux 6.5, or filtered by seccomp).
var noCachestat atomic.Bool

// dirtyInCache reports whether the page cache holds pages of fd that are
// dirty or being written back. It answers false where cachestat(2) is
// missing, or refused (it needs the file's owner or write permission).
func dirtyInCache(fd int) bool {
	dirty, known := cacheState(fd)
	return known && dirty
}

// cleanInCache reports whether the page cache holds no page of fd that is
// dirty or being written back, as far as cachestat(2) can tell: false when
// it cannot.
func cleanInCache(fd int) bool {
	dirty, known := cacheState(fd)
	return known && !dirty
}

func cacheState(fd int) (dirty, known bool) {
	st, known := cachestat(fd)
	return known && st.Dirty+st.Writeback > 0, known
}

// cachestat returns what cachestat(2) tells of all of fd's pages; known is
// false where it cannot tell.
func cachestat(fd int) (st unix.Cachestat_t, known bool) {
	if noCachestat.Load() {
		return st, false
	}
	err := unix.Cachestat(uint(fd), &unix.CachestatRange{}, &st, 0)
	if err == unix.ENOSYS {
		noCachestat.Store(true)
	}
	return st, err == nil
}

// pagesOf is how many pages hold size bytes.
func pagesOf(size int64) uint64 {
	ps := uint64(os.Getpagesize())
	return (uint64(size) + ps - 1) / ps
}

// cacheSeen is what one cachestat(2) of a whole file told, taken before
// the file is read: nothing, or whether pages were dirty or under
// writeback.
type cacheSeen uint8

const (
	cacheUnseen cacheSeen = iota
	cacheClean
	cacheDirty
)

// lookInCache reports whether the page cache holds all of f's before.Size
// bytes, and keeps whether any of its pages were dirty or under writeback
// for makeDurable: one cachestat(2) instead of two. Seen before the read,
// that answer stands after it. A page dirtied since would have been
// written by a write(2) or a write fault, which sets ctime; a file whose
// before.ctime is older than the data window then has a new ctime, which
// verify's lstat, after makeDurable, reports as a change.
func (f *stableFile) lookInCache() bool {
	if f.before.Size <= 0 {
		return false
	}
	cached, known := f.cachedPages()
	return known && cached >= pagesOf(f.before.Size)
}

// dirtyInCache is dirtyInCache(f.fd), from lookInCache's answer when it
// has one.
func (f *stableFile) dirtyInCache() bool {
	if f.cache != cacheUnseen {
		return f.cache == cacheDirty
	}
	return dirtyInCache(f.fd)
}
