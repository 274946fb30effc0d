package indexer

import (
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/hasher"
)

// maxDirFds bounds the directories dirFds holds open; a first scan's
// checkers work in a few directories at a time.
const maxDirFds = 32

// dirFds keeps O_PATH descriptors of the directories whose files a first
// scan's checkers open, so that each open looks up one name instead of
// every directory on the path: on the corpus those lookups cost 1.6 µs a
// file, most of them cache misses in a dentry table of a million entries.
// What a descriptor names is never trusted: the lstat of the full path
// after reading decides what was read (hasher.OpenAt), and a retry opens
// by the full path. The descriptors are closed whenever the pipeline
// empties, so an idle daemon holds no directory open (an unmount is not
// kept busy).
type dirFds struct {
	mu   sync.Mutex
	by   map[string]*dirFd
	tick uint64
}

// dirFd is one open directory; it is closed once dropped and unused.
type dirFd struct {
	fd      int
	refs    int
	used    uint64
	dropped bool
}

// open opens path's file as hasher.Open does, through its directory's
// descriptor when one can be had.
func (d *dirFds) open(path string) (*hasher.File, error) {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 || i == len(path)-1 {
		return hasher.Open(path)
	}
	dir, name := path[:i], path[i+1:]
	e := d.acquire(dir)
	if e == nil {
		return hasher.Open(path)
	}
	f, err := hasher.OpenAt(e.fd, name, path)
	d.release(dir, e, err != nil) // a directory that failed once is opened again
	return f, err
}

// acquire returns dir's entry, opening it if need be; nil when it cannot.
func (d *dirFds) acquire(dir string) *dirFd {
	d.mu.Lock()
	if e, ok := d.by[dir]; ok {
		d.tick++
		e.refs++
		e.used = d.tick
		d.mu.Unlock()
		return e
	}
	d.mu.Unlock()
	fd, err := openPath(dir)
	if err != nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.by[dir]; ok { // opened meanwhile by another checker
		unix.Close(fd)
		d.tick++
		e.refs++
		e.used = d.tick
		return e
	}
	if d.by == nil {
		d.by = make(map[string]*dirFd)
	}
	if len(d.by) >= maxDirFds {
		d.evictOldest()
	}
	d.tick++
	e := &dirFd{fd: fd, refs: 1, used: d.tick}
	d.by[dir] = e
	return e
}

// release gives e back; with drop, dir's entry is dropped too.
func (d *dirFds) release(dir string, e *dirFd, drop bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if drop && d.by[dir] == e {
		d.dropLocked(dir, e)
	}
	e.refs--
	if e.dropped && e.refs == 0 {
		unix.Close(e.fd)
	}
}

// closeAll drops every entry; those in use close when given back.
func (d *dirFds) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for dir, e := range d.by {
		d.dropLocked(dir, e)
		if e.refs == 0 {
			unix.Close(e.fd)
		}
	}
}

// held reports how many directories are held open, for tests.
func (d *dirFds) held() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.by)
}

func (d *dirFds) evictOldest() {
	var old string
	var oe *dirFd
	for dir, e := range d.by {
		if oe == nil || e.used < oe.used {
			old, oe = dir, e
		}
	}
	d.dropLocked(old, oe)
	if oe.refs == 0 {
		unix.Close(oe.fd)
	}
}

func (d *dirFds) dropLocked(dir string, e *dirFd) {
	delete(d.by, dir)
	e.dropped = true
}

// openPath opens dir as an O_PATH descriptor, following symlinks on the
// way as a lookup of a path under it would.
func openPath(dir string) (int, error) {
	for {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
