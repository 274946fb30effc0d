package store

import (
	"bytes"
	"container/heap"
	"encoding/binary"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// Runs (pending.go, pendinodes.go): a bucket of entries that each write
// transaction appends in key order under a run number of its own,
// be64(run) ‖ entry. A lookup seeks once in each run; a merge reads the
// runs side by side.

// findInRuns returns the key of entry e in the run bucket b, or nil.
func findInRuns(b *bolt.Bucket, e []byte) ([]byte, error) {
	var found []byte
	err := eachRun(b, e, func(k, _ []byte) bool {
		if len(k) == codec.RunHeader+len(e) {
			found = bytes.Clone(k)
			return false
		}
		return true
	})
	return found, err
}

// eachRun calls fn with every key and value of the run bucket b whose
// entry starts with p: a seek in each run. fn returns false to stop.
func eachRun(b *bolt.Bucket, p []byte, fn func(k, v []byte) bool) error {
	c := b.Cursor()
	more := true
	return firstOfRuns(b, func(first []byte) bool {
		pre := append(first[:codec.RunHeader:codec.RunHeader], p...)
		for k, v := c.Seek(pre); more && k != nil && bytes.HasPrefix(k, pre); k, v = c.Next() {
			more = fn(k, v)
		}
		return more
	})
}

// firstOfRuns calls fn with the first key of each run of b, in order,
// until fn returns false.
func firstOfRuns(b *bolt.Bucket, fn func(first []byte) bool) error {
	c := b.Cursor()
	for k, _ := c.First(); k != nil; {
		if len(k) <= codec.RunHeader {
			return fmt.Errorf("%w: run entry %x", ErrCorrupt, k)
		}
		run := binary.BigEndian.Uint64(k)
		if !fn(k) || run == math.MaxUint64 {
			return nil
		}
		k, _ = c.Seek(binary.BigEndian.AppendUint64(nil, run+1))
	}
	return nil
}

// writeRun writes the entries of buf to the run bucket b as one new run,
// in key order, so that they append to it; buf is emptied.
func writeRun(b *bolt.Bucket, buf *keyBuf) error {
	if buf.empty() {
		buf.reset()
		return nil
	}
	run, err := b.NextSequence()
	if err != nil {
		return err
	}
	b.FillPercent = appendFill
	key := binary.BigEndian.AppendUint64(nil, run)
	return buf.each(func(e, v []byte) error {
		key = append(key[:codec.RunHeader], e...)
		return b.Put(key, v) // bbolt copies keys
	})
}

// runMerge reads the runs of a run bucket side by side, in the order of
// their entries. It keeps where each run goes on, so one merge spans
// transactions; the bucket must not change in between.
type runMerge struct {
	next [][]byte // per run, the key to read next; nil once read to its end
	last []byte   // the entry given last, to pass over a repeat
}

func newRunMerge(b *bolt.Bucket) (*runMerge, error) {
	m := &runMerge{}
	err := firstOfRuns(b, func(first []byte) bool {
		m.next = append(m.next, bytes.Clone(first))
		return true
	})
	return m, err
}

// step calls fn with up to n further entries, run prefix removed, in
// order (an entry found in two runs once), and reports whether every run
// has been read.
func (m *runMerge) step(b *bolt.Bucket, n int, fn func(e, v []byte) error) (bool, error) {
	h := runHeap{}
	for i, key := range m.next {
		if key == nil {
			continue
		}
		c := b.Cursor()
		if k, v := c.Seek(key); sameRun(k, key) {
			h = append(h, runHead{run: i, c: c, k: k, v: v})
		} else {
			m.next[i] = nil
		}
	}
	heap.Init(&h)
	for ; n > 0 && len(h) > 0; n-- {
		top := &h[0]
		if e := top.k[codec.RunHeader:]; !bytes.Equal(e, m.last) {
			if err := fn(e, top.v); err != nil {
				return false, err
			}
			m.last = append(m.last[:0], e...)
		}
		if k, v := top.c.Next(); sameRun(k, top.k) {
			top.k, top.v = k, v
			heap.Fix(&h, 0)
		} else {
			m.next[top.run] = nil
			heap.Pop(&h)
		}
	}
	for _, r := range h {
		m.next[r.run] = bytes.Clone(r.k)
	}
	return len(h) == 0, nil
}

// sameRun reports whether key k is in the run of key of.
func sameRun(k, of []byte) bool {
	return len(k) > codec.RunHeader && bytes.Equal(k[:codec.RunHeader], of[:codec.RunHeader])
}

// runHead is a run's next entry in a runMerge step.
type runHead struct {
	run  int
	c    *bolt.Cursor
	k, v []byte
}

// runHeap orders the runs' next entries, smallest first.
type runHeap []runHead

func (h runHeap) Len() int { return len(h) }
func (h runHeap) Less(i, j int) bool {
	return bytes.Compare(h[i].k[codec.RunHeader:], h[j].k[codec.RunHeader:]) < 0
}
func (h runHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)   { *h = append(*h, x.(runHead)) }
func (h *runHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// runDrops finds the entries a transaction drops from a run bucket: a
// seek in each run for the first few, then an index of the whole bucket,
// read once, so that removing a large tree before its merge costs one pass
// and not one seek per run and record.
type runDrops struct {
	seeks int
	index map[string][]byte // entry → key, once built
}

// seekDrops is how many drops a transaction finds by seeking.
const seekDrops = 64

// find returns the key of entry e in b, or nil, and forgets it: the
// caller deletes it.
func (d *runDrops) find(b *bolt.Bucket, e []byte) ([]byte, error) {
	if d.index == nil && d.seeks < seekDrops {
		d.seeks++
		return findInRuns(b, e)
	}
	if d.index == nil {
		d.index = make(map[string][]byte)
		err := b.ForEach(func(k, _ []byte) error {
			if len(k) <= codec.RunHeader {
				return fmt.Errorf("%w: run entry %x", ErrCorrupt, k)
			}
			d.index[string(k[codec.RunHeader:])] = bytes.Clone(k)
			return nil
		})
		if err != nil {
			d.index = nil
			return nil, err
		}
	}
	k := d.index[string(e)]
	delete(d.index, string(e))
	return k, nil
}
