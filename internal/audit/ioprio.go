package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// I/O priority (ioprio_set(2)): the class sits above bit 13.
const (
	ioprioWhoProcess = 1 // a thread id; 0 is the calling thread
	ioprioClassShift = 13
	ioprioClassIdle  = 3
)

// idleIO puts the calling thread, which the caller has locked, in the idle
// I/O class: its reads wait while any other I/O is queued on the device.
func idleIO() error {
	_, _, e := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, 0, ioprioClassIdle<<ioprioClassShift)
	if e != 0 {
		return fmt.Errorf("audit: ioprio_set: %w", e)
	}
	return nil
}

// ioClass returns the I/O class of the calling thread.
func ioClass() (int, error) {
	v, _, e := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(v) >> ioprioClassShift, nil
}

// schedulerOf returns the I/O scheduler of the block device behind dev,
// read from sysfs under sys ("/sys"), or "" when dev has none (tmpfs, a
// network file system, an overlay).
func schedulerOf(sys string, dev uint64) string {
	base, err := filepath.EvalSymlinks(filepath.Join(sys, "dev", "block", fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev))))
	if err != nil {
		return ""
	}
	// A partition has no queue of its own: its disk's is one level up.
	for _, p := range []string{filepath.Join(base, "queue", "scheduler"), filepath.Join(filepath.Dir(base), "queue", "scheduler")} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.IndexByte(s, '['); i >= 0 {
			if j := strings.IndexByte(s[i:], ']'); j > 0 {
				return s[i+1 : i+j]
			}
		}
		return strings.TrimSpace(s)
	}
	return ""
}

// idleHonoured says whether a scheduler serves the idle class last. Only
// BFQ (and the old CFQ) do; mq-deadline, kyber and none ignore classes.
func idleHonoured(sched string) bool { return sched == "bfq" || sched == "cfq" }
