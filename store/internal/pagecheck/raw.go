package pagecheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
)

// Raw reads a bbolt file page by page: a damaged page is met only when
// it is read, and is an error then.
type Raw struct {
	r    *Reader
	root uint64 // the root bucket's page
}

// OpenRaw reads the meta pages of f.
func OpenRaw(f *os.File) (*Raw, error) {
	m, ps, err := ReadMetas(f)
	if err != nil {
		return nil, err
	}
	return &Raw{r: &Reader{F: f, PS: ps, HWM: m.PGID}, root: m.Root}, nil
}

// Values returns the values of the keys of bucket named in want, a
// bucket of the root bucket. ok is false when the
// bucket is not there; err when a page on the way did not read or decode.
func (x *Raw) Values(bucket []byte, want []string) (out map[string][]byte, ok bool, err error) {
	var head []byte
	err = x.r.leaves(x.root, 0, func(e Elem) {
		if e.IsBucket() && bytes.Equal(e.Key, bucket) {
			head = bytes.Clone(e.Value)
		}
	})
	if err != nil || head == nil {
		return nil, false, err
	}
	out = map[string][]byte{}
	collect := func(e Elem) {
		if !e.IsBucket() && slices.Contains(want, string(e.Key)) {
			out[string(e.Key)] = bytes.Clone(e.Value)
		}
	}
	if len(head) < inBucketSize {
		return nil, true, fmt.Errorf("bucket %q: bad header", bucket)
	}
	if root := binary.LittleEndian.Uint64(head); root != 0 {
		return out, true, x.r.leaves(root, 0, collect)
	}
	inline := head[inBucketSize:] // an inline bucket: one leaf page
	if len(inline) < pageHeader {
		return nil, true, fmt.Errorf("bucket %q: bad inline page", bucket)
	}
	p := ParseHeader(inline)
	es, err := p.Elems()
	for _, e := range es {
		collect(e)
	}
	return out, true, err
}

// leaves calls fn for every leaf element of the tree at page id, as far
// as its pages read and decode.
func (r *Reader) leaves(id uint64, depth int, fn func(Elem)) error {
	if depth > 32 {
		return errors.New("tree too deep")
	}
	p, err := r.Page(id)
	if err != nil {
		return err
	}
	es, err := p.Elems()
	if err != nil {
		return err
	}
	for _, e := range es {
		if p.IsLeaf() {
			fn(e)
		} else if err := r.leaves(e.Child, depth+1, fn); err != nil {
			return err
		}
	}
	return nil
}
