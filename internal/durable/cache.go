package durable

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// noCachestat is set once the kernel turned cachestat(2) down for good
// (before Linux 6.5, or filtered by seccomp).
var noCachestat atomic.Bool

// Dirty reports whether the page cache holds pages of fd that are
// dirty or being written back. It answers false where cachestat(2) is
// missing, or refused (it needs the file's owner or write permission).
func Dirty(fd int) bool {
	dirty, known := cacheState(fd)
	return known && dirty
}

// clean reports whether the page cache holds no page of fd that is
// dirty or being written back, as far as cachestat(2) can tell: false when
// it cannot.
func clean(fd int) bool {
	dirty, known := cacheState(fd)
	return known && !dirty
}

func cacheState(fd int) (dirty, known bool) {
	st, known := Cachestat(fd)
	return known && st.Dirty+st.Writeback > 0, known
}

// Cachestat returns what cachestat(2) tells of all of fd's pages; known is
// false where it cannot tell.
func Cachestat(fd int) (st unix.Cachestat_t, known bool) {
	if noCachestat.Load() {
		return st, false
	}
	err := unix.Cachestat(uint(fd), &unix.CachestatRange{}, &st, 0)
	if err == unix.ENOSYS {
		noCachestat.Store(true)
	}
	return st, err == nil
}
