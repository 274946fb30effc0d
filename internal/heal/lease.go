package heal

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// A write lease on the rotten file, held from the last check to the
// swap: the kernel grants it only while no other process holds the file
// open, and a process that opens it meanwhile waits on the lease (up to
// lease-break-time) and shows in it. Without one, a writer that opened
// the file before the swap would write into the bytes put aside, and the
// name would lose its edit.
type lease struct{ f *os.File }

// errInUse: another process holds the rotten file open.
var errInUse = errors.New("another process holds the file open")

// leaseRotten opens name in the folder dfd without following a link,
// checks it is the rotten inode ino, and takes a write lease on it.
func leaseRotten(dfd int, name string, ino uint64) (*lease, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	path := name
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Ino != ino {
		f.Close()
		return nil, fmt.Errorf("%s is no longer the rotten file", path)
	}
	// A write lease is taken over a read lease: the kernel refuses one
	// straight away while this very descriptor is the only opener too.
	for _, typ := range []int{unix.F_RDLCK, unix.F_WRLCK} {
		if _, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, typ); err != nil {
			f.Close()
			if errors.Is(err, unix.EAGAIN) {
				return nil, errInUse
			}
			return nil, fmt.Errorf("cannot lease %s (F_SETLEASE): %w", path, err)
		}
	}
	return &lease{f}, nil
}

// intact reports whether the lease is still held and no process has
// started to open the file since it was taken: taking it again checks
// the kernel's count of openers, which an open raises before it waits.
func (l *lease) intact() bool {
	t, err := unix.FcntlInt(l.f.Fd(), unix.F_GETLEASE, 0)
	if err != nil || t != unix.F_WRLCK {
		return false
	}
	_, err = unix.FcntlInt(l.f.Fd(), unix.F_SETLEASE, unix.F_WRLCK)
	return err == nil
}

// release gives the lease up: a process waiting on it goes on.
func (l *lease) release() {
	unix.FcntlInt(l.f.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
	l.f.Close()
}
