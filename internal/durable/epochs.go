package durable

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// File systems whose syncfs(2) commits their journal, and so makes the data
// of every file written before it durable (statfs(2) magic numbers).
const (
	xfsMagic   = 0x58465342
	ext4Magic  = 0xef53 // ext2, ext3 and ext4
	btrfsMagic = 0x9123683e
)

// coverMargin is how long before an epoch began a file must have been last
// changed for that epoch to cover it. A file's ctime is taken when a
// write(2) begins, and one call can dirty pages for a while after (a large
// write, or one the kernel throttles for its dirty limits): the margin
// bounds that. A variable for tests.
var coverMargin = 10 * time.Second

// EpochAfter is how many files of one file system are fdatasync'ed one by
// one before an epoch is started for it.
const EpochAfter = 32

// epochs spares a backlog of recently written files one fdatasync(2) each.
// After EpochAfter files of a file system needed one, a syncfs(2) of it
// runs in the background, then an fdatasync(2) that flushes the disk's
// write cache (XFS's syncfs may not, when its log had nothing new). A file
// last changed more than coverMargin before an epoch began is on disk once
// that epoch has ended, if the page cache holds no dirty page of it, and
// is not synced again: what a first index of a tree written a while ago,
// or a backlog, meets file after file. Such a file waits for the epoch
// that covers it rather than compete with it; any other file is
// fdatasync'ed, more cheaply once an epoch wrote its data back with the
// rest in one sweep. Only XFS, ext4 and btrfs have epochs.
type epochs struct {
	mu      sync.Mutex
	last    time.Time // start of the last epoch that succeeded; zero: none
	running *epoch    // nil when none runs
	synced  int       // files fdatasync'ed since the last epoch began
}

// epoch is one syncfs of a file system.
type epoch struct {
	start time.Time
	done  chan struct{}
	err   error // set before done is closed
}

// epochsByDev maps a file system's device to its *epochs, or to a nil
// *epochs where it has none. A device number can come back for another
// file system (a disk swapped, a loop device reused): its epochs then
// cover only files clean in the page cache and older than the mount,
// whose data the mount read from the disk.
var epochsByDev sync.Map

// epochsRunning counts the epochs running, for tests that unmount.
var epochsRunning sync.WaitGroup

// WaitEpochs waits for the epochs running to end. Each holds a descriptor
// of its file system: a test that unmounts one calls it first.
func WaitEpochs() { epochsRunning.Wait() }

// ResetForTest waits for the epochs running, forgets every file system's
// epochs (a loop device's number comes back for the next test's file
// system) and sets the cover margin; restore sets the margin back. Tests
// only.
func ResetForTest(margin time.Duration) (restore func()) {
	epochsRunning.Wait()
	epochsByDev.Clear()
	old := coverMargin
	coverMargin = margin
	return func() { coverMargin = old }
}

// epochsFor returns the epochs of the file system holding fd (device dev),
// or nil.
func epochsFor(fd int, dev uint64) *epochs {
	if e, ok := epochsByDev.Load(dev); ok {
		return e.(*epochs)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return nil
	}
	var e *epochs
	switch uint32(st.Type) {
	case xfsMagic, ext4Magic, btrfsMagic:
		e = new(epochs)
	}
	got, _ := epochsByDev.LoadOrStore(dev, e)
	return got.(*epochs)
}

// covered reports whether an epoch that ended made the data of the file
// open on fd, last changed at ctimeNs, durable.
func (e *epochs) covered(fd int, ctimeNs int64) bool {
	e.mu.Lock()
	last, run := e.last, e.running
	e.mu.Unlock()
	if covers(last, ctimeNs) && clean(fd) {
		return true
	}
	if run == nil || !covers(run.start, ctimeNs) {
		return false
	}
	<-run.done
	return run.err == nil && clean(fd)
}

// noteSynced counts a file of this file system fdatasync'ed alone, and
// starts an epoch in the background, with its own descriptor of the file
// open on fd, when EpochAfter were since the last one began.
func (e *epochs) noteSynced(fd int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.synced++; e.synced < EpochAfter || e.running != nil {
		return
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return
	}
	run := &epoch{start: time.Now(), done: make(chan struct{})}
	e.running, e.synced = run, 0
	epochsRunning.Add(1)
	go e.run(dup, run)
}

func (e *epochs) run(fd int, run *epoch) {
	defer epochsRunning.Done()
	run.err = syncFS(fd)
	unix.Close(fd)
	e.mu.Lock()
	e.running = nil
	if run.err == nil {
		e.last = run.start
	}
	e.mu.Unlock()
	close(run.done)
}

// covers reports whether an epoch that began at start covers a file last
// changed at ctimeNs by the file's age. ctime comes from the wall clock,
// so a clock set since start voids the comparison.
func covers(start time.Time, ctimeNs int64) bool {
	if start.IsZero() {
		return false
	}
	now := time.Now()
	step := now.Sub(start) - time.Duration(now.UnixNano()-start.UnixNano()) // monotonic − wall
	if step > time.Second || step < -time.Second {
		return false
	}
	return ctimeNs < start.UnixNano()-int64(coverMargin)
}

// syncFS is one epoch: syncfs(2) of the file system holding fd, then
// fdatasync(2) of fd's file, which flushes the disk's write cache.
func syncFS(fd int) error {
	for {
		err := unix.Syncfs(fd)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	return fdatasync(fd)
}
