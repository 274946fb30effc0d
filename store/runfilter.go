package store

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// The inode filter: which inodes the deferred inode entries may name.
//
// A lookup by inode (ByInodeAll) seeks in each run of pendinodes, and a
// scan into an index that was not empty looks up every new path's inode
// to find renames and hard links: with hundreds of runs waiting, those
// seeks were a quarter of a 10^6-file scan's CPU time (BENCHMARKS.md). So
// the store keeps, in memory, a Bloom filter of the id(dev) ‖ id(ino)
// prefixes of the deferred inode entries, and a lookup whose inode the
// filter has never seen skips the runs.
//
// The rules that keep a skip right:
//   - pendinodes numbers its runs from its bucket sequence, which
//     txRuns.empty carries over to the new bucket, so run numbers only grow;
//   - a filter holds every entry of each run numbered above its from, added
//     by the writer before the transaction that writes the run commits;
//   - the writer installs a new filter, from the bucket's sequence, after
//     the merge that empties the bucket commits and before it writes a run.
//
// A reader, inside its transaction, takes the first run number in its
// snapshot and the filter installed now. If that run is above the filter's
// from, every run it sees was written while that filter was the writer's,
// so a filter that has not seen the inode proves no run holds it. A filter
// installed after a merge its snapshot predates has a from at or above the
// snapshot's runs, and the reader seeks in the runs as before; so does a
// read-only store, which keeps no filter.

// filterBitsPerEntry and filterHashes give about 1 % false positives.
const (
	filterBitsPerEntry = 10
	filterHashes       = 7
	filterFirstCap     = 1 << 14 // entries of the first Bloom filter; each next one doubles
)

// runFilter is a growing Bloom filter: a list of filters of doubling
// capacity, of which only the last takes new entries. The writer adds;
// readers test concurrently.
type runFilter struct {
	from   uint64 // runs numbered above it are all in the filter
	seed   maphash.Seed
	blooms atomic.Pointer[[]*bloom]
	n, cap int // the last filter's entries and capacity: the writer's
}

type bloom struct {
	words []atomic.Uint64
	mask  uint64 // bits - 1
}

func newRunFilter(from uint64) *runFilter {
	f := &runFilter{from: from, seed: maphash.MakeSeed()}
	f.grow(filterFirstCap)
	return f
}

func (f *runFilter) grow(entries int) {
	m := uint64(1) << bits.Len64(uint64(entries*filterBitsPerEntry-1))
	b := &bloom{words: make([]atomic.Uint64, m/64), mask: m - 1}
	var list []*bloom
	if old := f.blooms.Load(); old != nil {
		list = append(list, *old...)
	}
	list = append(list, b)
	f.blooms.Store(&list)
	f.n, f.cap = 0, entries
}

// add records prefix p. Only the writer calls it.
func (f *runFilter) add(p []byte) {
	if f.n >= f.cap {
		f.grow(2 * f.cap)
	}
	list := *f.blooms.Load()
	list[len(list)-1].set(maphash.Bytes(f.seed, p))
	f.n++
}

// mayHold reports whether p may have been added.
func (f *runFilter) mayHold(p []byte) bool {
	h := maphash.Bytes(f.seed, p)
	for _, b := range *f.blooms.Load() {
		if b.has(h) {
			return true
		}
	}
	return false
}

func (b *bloom) set(h uint64) {
	h1, h2 := h, bits.RotateLeft64(h, 32)|1
	for i := range uint64(filterHashes) {
		bit := (h1 + i*h2) & b.mask
		b.words[bit/64].Or(1 << (bit % 64))
	}
}

func (b *bloom) has(h uint64) bool {
	h1, h2 := h, bits.RotateLeft64(h, 32)|1
	for i := range uint64(filterHashes) {
		bit := (h1 + i*h2) & b.mask
		if b.words[bit/64].Load()&(1<<(bit%64)) == 0 {
			return false
		}
	}
	return true
}

// inodePrefixLen returns the length of the id(dev) ‖ id(ino) prefix of
// inode entry e, or 0 when e does not start with two ids.
func inodePrefixLen(e []byte) int {
	_, n := codec.ReadID(e)
	if n == 0 {
		return 0
	}
	_, m := codec.ReadID(e[n:])
	if m == 0 {
		return 0
	}
	return n + m
}

// openInodeFilter makes the filter at open, before the writer runs: empty
// for the runs after b's sequence when b, the pendinodes bucket, holds
// none, else holding the entries of the runs b holds (a run cut short by a
// crash, or by a merge that failed). A damaged entry leaves the store
// without a filter, so lookups seek in the runs and meet the damage there.
func openInodeFilter(b *bolt.Bucket) *runFilter {
	c := b.Cursor()
	if k, _ := c.First(); k == nil {
		return newRunFilter(b.Sequence())
	}
	f := newRunFilter(0)
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		n := 0
		if len(k) > codec.RunHeader {
			n = inodePrefixLen(k[codec.RunHeader:])
		}
		if n == 0 {
			return nil
		}
		f.add(k[codec.RunHeader : codec.RunHeader+n])
	}
	return f
}

// mayHoldInode reports whether a run of b, the pendinodes bucket of a
// snapshot, may hold an entry with prefix p (id(dev) ‖ id(ino)).
func (d *deferred) mayHoldInode(b *bolt.Bucket, p []byte) bool {
	k, _ := b.Cursor().First()
	if k == nil {
		return false
	}
	f := d.inoFilter.Load()
	if f == nil || len(k) < codec.RunHeader || binary.BigEndian.Uint64(k) <= f.from {
		return true
	}
	return f.mayHold(p)
}

// renewInodeFilter installs an empty filter for the runs after the
// pendinodes bucket's sequence: after a merge emptied the bucket.
func (d *deferred) renewInodeFilter() error {
	return d.view(func(tx *bolt.Tx) error {
		d.inoFilter.Store(newRunFilter(tx.Bucket(codec.BucketPendInodes).Sequence()))
		return nil
	})
}
