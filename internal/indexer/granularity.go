package indexer

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

var errNotDir = unix.ENOTDIR

// granularity caches the timestamp granularity per device. Linux file
// systems with nanosecond timestamps advance them with the kernel's coarse
// clock (one tick, at most 10 ms); FAT keeps 2 s. Unknown kinds get a safe
// second.
type granularity struct {
	m sync.Map // dev → time.Duration
}

const (
	fineGranularity = 100 * time.Millisecond
	fatGranularity  = 2 * time.Second
	safeGranularity = time.Second
)

// Magic numbers from statfs(2).
const (
	msdosMagic = 0x4d44
	exfatMagic = 0x2011bab0
	fuseMagic  = 0x65735546
	smbMagic   = 0x517b
	cifsMagic  = 0xff534d42
	nfsMagic   = 0x6969
)

func (g *granularity) of(dev uint64) time.Duration {
	if d, ok := g.m.Load(dev); ok {
		return d.(time.Duration)
	}
	return fineGranularity
}

// learn records the granularity of the file system holding path.
func (g *granularity) learn(dev uint64, path string) {
	if _, ok := g.m.Load(dev); ok {
		return
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return
	}
	d := fineGranularity
	switch uint32(st.Type) {
	case msdosMagic, exfatMagic:
		d = fatGranularity
	case fuseMagic, smbMagic, cifsMagic, nfsMagic:
		d = safeGranularity
	}
	g.m.Store(dev, d)
}
