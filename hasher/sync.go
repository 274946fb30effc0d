package hasher

import (
	"io/fs"
	"os"
	"time"

	"github.com/annexd/annexd/internal/durable"
)

// window is the data window of o: durable.DataWindow() unless o sets one.
func (o readOpts) window() time.Duration {
	if o.syncWindow != 0 {
		return o.syncWindow
	}
	return durable.DataWindow()
}

// testHookSync, set only by tests, runs after a file's data was synced.
var testHookSync func(path string)

// makeDurable syncs the data of a file that may hold some that is not on
// disk yet, so that what was read from the page cache is what the disk
// holds: a file whose ctime is within the window, or one the page cache
// says is dirty or under writeback although it is older (writeback that
// lags behind, a device that stalls). A file that an epoch of its file
// system covers needs no sync (package durable). syncWindow < 0 never
// syncs.
func (f *stableFile) makeDurable(o readOpts) error {
	if o.syncWindow < 0 {
		return nil
	}
	if !durable.MayHoldDirtyData(f.before.CtimeNs, time.Now().UnixNano(), o.window()) && !f.dirtyInCache() {
		return nil
	}
	synced, err := durable.Sync(f.fd, f.before.Dev, f.before.CtimeNs, !o.noEpochs)
	if err != nil {
		return &fs.PathError{Op: "fdatasync", Path: f.path, Err: err}
	}
	if synced && testHookSync != nil {
		testHookSync(f.path)
	}
	return nil
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

// dirtyInCache is durable.Dirty(f.fd), from lookInCache's answer when it
// has one.
func (f *stableFile) dirtyInCache() bool {
	if f.cache != cacheUnseen {
		return f.cache == cacheDirty
	}
	return durable.Dirty(f.fd)
}

// cachedPages returns how many of f's pages the page cache held when first
// asked, and keeps whether any was dirty or under writeback for makeDurable
// (see lookInCache); known is false where cachestat(2) cannot tell. One
// look a file: the answer stands until the check after reading.
func (f *stableFile) cachedPages() (cached uint64, known bool) {
	if f.cache != cacheUnseen {
		return f.pages, true
	}
	st, known := durable.Cachestat(f.fd)
	if !known {
		return 0, false
	}
	f.cache, f.pages = cacheClean, st.Cache
	if st.Dirty+st.Writeback > 0 {
		f.cache = cacheDirty
	}
	return st.Cache, true
}
