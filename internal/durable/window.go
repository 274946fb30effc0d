package durable

import (
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
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

// MayHoldDirtyData reports whether a file whose ctime is ctimeNs may, at
// nowNs, hold written data that is not on disk yet. Every write(2) and
// mmap write fault sets ctime to the time of the write, and nothing moves
// ctime back, so a file whose ctime is older than the window was last
// written longer ago than writeback takes. A ctime in the future (a clock
// set back) proves nothing.
func MayHoldDirtyData(ctimeNs, nowNs int64, window time.Duration) bool {
	return window == NoWriteback || nowNs-ctimeNs < int64(window)
}
