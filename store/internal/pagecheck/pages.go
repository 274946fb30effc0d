package pagecheck

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// bbolt's page format: a 16-byte header (id, flags, count, overflow),
// then 16-byte elements whose keys and values follow them.
const (
	pageHeader   = 16
	elemSize     = 16
	pageBranch   = 0x01
	pageLeaf     = 0x02
	pageFreelist = 0x10
	elemBucket   = 0x01 // a leaf element holding a nested bucket
	inBucketSize = 16   // a bucket value: root page id, sequence
	// NoFreelist is Meta.Freelist when bbolt keeps no freelist page.
	NoFreelist = ^uint64(0)
)

// Page is one page as read from the file.
type Page struct {
	ID       uint64
	Flags    uint16
	Count    int
	Overflow uint32
	B        []byte // the page and its overflow pages
}

// IsLeaf reports whether p is a leaf page.
func (p *Page) IsLeaf() bool { return p.Flags == pageLeaf }

// Elem is one element of a branch or leaf page.
type Elem struct {
	Flags uint32 // leaf elements only
	Key   []byte
	Value []byte // leaf elements only
	Child uint64 // branch elements only
}

// IsBucket reports whether e, a leaf element, holds a nested bucket.
func (e *Elem) IsBucket() bool { return e.Flags&elemBucket != 0 }

// Reader reads the pages below HWM of a bbolt file with pread.
type Reader struct {
	F    *os.File
	PS   int    // the page size
	HWM  uint64 // the high-water mark: the file's pages in use or free
	Read int    // pages read, for tests and measurements
}

// Page reads page id and its overflow pages.
func (r *Reader) Page(id uint64) (Page, error) {
	if id < 2 || id >= r.HWM {
		return Page{}, fmt.Errorf("page id %d outside the file's %d pages", id, r.HWM)
	}
	b := make([]byte, r.PS)
	if err := r.readAt(b, id); err != nil {
		return Page{}, err
	}
	p := ParseHeader(b)
	if p.ID != id {
		return p, fmt.Errorf("page %d identifies itself as page %d", id, p.ID)
	}
	if p.Overflow > 0 {
		if uint64(p.Overflow) >= r.HWM-id {
			return p, fmt.Errorf("page %d: %d overflow pages run past the file's %d pages", id, p.Overflow, r.HWM)
		}
		p.B = make([]byte, r.PS*(1+int(p.Overflow)))
		copy(p.B, b)
		if err := r.readAt(p.B[r.PS:], id+1); err != nil {
			return p, err
		}
	}
	return p, nil
}

func (r *Reader) readAt(b []byte, id uint64) error {
	r.Read += len(b) / r.PS
	if _, err := r.F.ReadAt(b, int64(id)*int64(r.PS)); err != nil {
		if err == io.EOF {
			return fmt.Errorf("page %d lies past the end of the file", id)
		}
		return err
	}
	return nil
}

func ParseHeader(b []byte) Page {
	le := binary.LittleEndian
	return Page{ID: le.Uint64(b), Flags: le.Uint16(b[8:]), Count: int(le.Uint16(b[10:])),
		Overflow: le.Uint32(b[12:]), B: b}
}

// Elems decodes the elements of a branch or leaf page and checks that each
// lies inside the page and that the keys ascend strictly.
func (p *Page) Elems() ([]Elem, error) {
	if p.Flags != pageBranch && p.Flags != pageLeaf {
		return nil, fmt.Errorf("page %d has type %#x, want a branch or leaf page", p.ID, p.Flags)
	}
	le := binary.LittleEndian
	if pageHeader+p.Count*elemSize > len(p.B) {
		return nil, fmt.Errorf("page %d: %d elements do not fit", p.ID, p.Count)
	}
	out := make([]Elem, p.Count)
	for i := range out {
		at := pageHeader + i*elemSize
		e := p.B[at : at+elemSize]
		var pos, ksize, vsize int
		if p.Flags == pageBranch {
			pos, ksize = int(le.Uint32(e)), int(le.Uint32(e[4:]))
			out[i].Child = le.Uint64(e[8:])
		} else {
			out[i].Flags = le.Uint32(e)
			pos, ksize, vsize = int(le.Uint32(e[4:])), int(le.Uint32(e[8:])), int(le.Uint32(e[12:]))
		}
		start := at + pos
		if ksize == 0 || start < at || start+ksize+vsize > len(p.B) {
			return nil, fmt.Errorf("page %d: element %d lies outside the page", p.ID, i)
		}
		out[i].Key = p.B[start : start+ksize]
		out[i].Value = p.B[start+ksize : start+ksize+vsize]
		if i > 0 && string(out[i-1].Key) >= string(out[i].Key) {
			return nil, fmt.Errorf("page %d: keys %d and %d out of order", p.ID, i-1, i)
		}
	}
	return out, nil
}

// Freelist reads the free page ids stored at page id.
func (r *Reader) Freelist(id uint64) (Page, []uint64, error) {
	p, err := r.Page(id)
	if err != nil {
		return p, nil, err
	}
	if p.Flags != pageFreelist {
		return p, nil, fmt.Errorf("freelist page %d has type %#x", id, p.Flags)
	}
	le := binary.LittleEndian
	data, n := p.B[pageHeader:], p.Count
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
