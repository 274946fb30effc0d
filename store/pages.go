package store

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// bbolt's page format, as the quick check reads it: a 16-byte header (id,
// flags, count, overflow), then 16-byte elements whose keys and values
// follow them. The check reads pages with pread, not through bbolt's
// mmap, so a damaged page is an error here and never a fault.
const (
	pageHeader   = 16
	elemSize     = 16
	pageBranch   = 0x01
	pageLeaf     = 0x02
	pageFreelist = 0x10
	elemBucket   = 0x01 // a leaf element holding a nested bucket
	inBucketSize = 16   // a bucket value: root page id, sequence
	noFreelist   = ^uint64(0)
)

// rawPage is one page as read from the file.
type rawPage struct {
	id       uint64
	flags    uint16
	count    int
	overflow uint32
	b        []byte // the page and its overflow pages
}

// elem is one element of a branch or leaf page.
type elem struct {
	flags uint32 // leaf elements only
	key   []byte
	value []byte // leaf elements only
	child uint64 // branch elements only
}

// pageReader reads the pages below hwm of an index file.
type pageReader struct {
	f    *os.File
	ps   int
	hwm  uint64
	read int // pages read, for tests and measurements
}

// page reads page id and its overflow pages.
func (r *pageReader) page(id uint64) (rawPage, error) {
	if id < 2 || id >= r.hwm {
		return rawPage{}, fmt.Errorf("page id %d outside the file's %d pages", id, r.hwm)
	}
	b := make([]byte, r.ps)
	if err := r.readAt(b, id); err != nil {
		return rawPage{}, err
	}
	p := parseHeader(b)
	if p.id != id {
		return p, fmt.Errorf("page %d identifies itself as page %d", id, p.id)
	}
	if p.overflow > 0 {
		if uint64(p.overflow) >= r.hwm-id {
			return p, fmt.Errorf("page %d: %d overflow pages run past the file's %d pages", id, p.overflow, r.hwm)
		}
		p.b = make([]byte, r.ps*(1+int(p.overflow)))
		copy(p.b, b)
		if err := r.readAt(p.b[r.ps:], id+1); err != nil {
			return p, err
		}
	}
	return p, nil
}

func (r *pageReader) readAt(b []byte, id uint64) error {
	r.read += len(b) / r.ps
	if _, err := r.f.ReadAt(b, int64(id)*int64(r.ps)); err != nil {
		if err == io.EOF {
			return fmt.Errorf("page %d lies past the end of the file", id)
		}
		return err
	}
	return nil
}

func parseHeader(b []byte) rawPage {
	le := binary.LittleEndian
	return rawPage{id: le.Uint64(b), flags: le.Uint16(b[8:]), count: int(le.Uint16(b[10:])),
		overflow: le.Uint32(b[12:]), b: b}
}

// elems decodes the elements of a branch or leaf page and checks that each
// lies inside the page and that the keys ascend strictly.
func (p *rawPage) elems() ([]elem, error) {
	if p.flags != pageBranch && p.flags != pageLeaf {
		return nil, fmt.Errorf("page %d has type %#x, want a branch or leaf page", p.id, p.flags)
	}
	le := binary.LittleEndian
	if pageHeader+p.count*elemSize > len(p.b) {
		return nil, fmt.Errorf("page %d: %d elements do not fit", p.id, p.count)
	}
	out := make([]elem, p.count)
	for i := range out {
		at := pageHeader + i*elemSize
		e := p.b[at : at+elemSize]
		var pos, ksize, vsize int
		if p.flags == pageBranch {
			pos, ksize = int(le.Uint32(e)), int(le.Uint32(e[4:]))
			out[i].child = le.Uint64(e[8:])
		} else {
			out[i].flags = le.Uint32(e)
			pos, ksize, vsize = int(le.Uint32(e[4:])), int(le.Uint32(e[8:])), int(le.Uint32(e[12:]))
		}
		start := at + pos
		if ksize == 0 || start < at || start+ksize+vsize > len(p.b) {
			return nil, fmt.Errorf("page %d: element %d lies outside the page", p.id, i)
		}
		out[i].key = p.b[start : start+ksize]
		out[i].value = p.b[start+ksize : start+ksize+vsize]
		if i > 0 && string(out[i-1].key) >= string(out[i].key) {
			return nil, fmt.Errorf("page %d: keys %d and %d out of order", p.id, i-1, i)
		}
	}
	return out, nil
}

// freelist reads the free page ids stored at page id.
func (r *pageReader) freelist(id uint64) (rawPage, []uint64, error) {
	p, err := r.page(id)
	if err != nil {
		return p, nil, err
	}
	if p.flags != pageFreelist {
		return p, nil, fmt.Errorf("freelist page %d has type %#x", id, p.flags)
	}
	le := binary.LittleEndian
	data, n := p.b[pageHeader:], p.count
	if n == 0xFFFF { // the count did not fit the header: it is the first id
		n64 := le.Uint64(data)
		if n64 > uint64(len(data)/8) {
			return p, nil, fmt.Errorf("freelist page %d: %d ids do not fit", id, n64)
		}
		n, data = int(n64), data[8:]
	}
	if n*8 > len(data) {
		return p, nil, fmt.Errorf("freelist page %d: %d ids do not fit", id, n)
	}
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = le.Uint64(data[8*i:])
	}
	return p, ids, nil
}

// pageSet is a set of page ids below a high-water mark.
type pageSet struct {
	bits []uint64
	n    uint64 // ids in the set
}

func newPageSet(hwm uint64) pageSet { return pageSet{bits: make([]uint64, (hwm+63)/64)} }

func (s *pageSet) has(id uint64) bool { return s.bits[id/64]&(1<<(id%64)) != 0 }

// add adds id, which must be below the high-water mark and not in s.
func (s *pageSet) add(id uint64) {
	s.bits[id/64] |= 1 << (id % 64)
	s.n++
}
