package pagecheck

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
)

// Entry checks one entry of bucket, named with its parents' names
// ("parent/child") when nested; an error stops the walk.
type Entry func(bucket string, k, v []byte) error

// Walk checks the page structure of the bbolt file f, of page size ps as
// bbolt opened it. It reads both meta pages, the freelist, every branch
// page, and at the leaves' level of each bucket a sample of leaves pages,
// spread evenly, whose entries it hands to entry; it claims the other
// leaves without reading them. Every page it meets must lie below the
// high-water mark and be used once; when it read every leaf, every page
// must be in use or free. It returns what it counted.
func Walk(f *os.File, ps, leaves int, entry Entry) (*Result, error) {
	q := &Result{r: Reader{F: f, PS: ps}, leaves: leaves, entry: entry, exact: true, keys: map[string]*keyCount{}}
	return q, q.run()
}

// Result is what one Walk read and counted.
type Result struct {
	r      Reader
	leaves int
	entry  Entry
	used   pageSet // meta, freelist and tree pages met so far
	free   pageSet // the freelist's ids
	exact  bool    // every leaf was read, so used is complete
	keys   map[string]*keyCount
}

// PagesRead is how many pages the walk read; Pages the file's pages.
func (q *Result) PagesRead() int { return q.r.Read }

// Pages is the file's high-water mark: its pages in use or free.
func (q *Result) Pages() uint64 { return q.r.HWM }

// keyCount counts the keys of one bucket.
type keyCount struct {
	n      int64 // keys in the leaves read
	unread int64 // leaves not read
}

// ref is a page to read and the range its keys must lie in ([lo, hi);
// nil is unbounded).
type ref struct {
	id     uint64
	lo, hi []byte
}

func (q *Result) run() error {
	m, err := q.meta()
	if err != nil {
		return err
	}
	q.r.HWM = m.PGID
	q.used, q.free = newPageSet(m.PGID), newPageSet(m.PGID)
	q.used.add(0)
	q.used.add(1)
	if m.Freelist != NoFreelist {
		p, ids, err := q.r.Freelist(m.Freelist)
		if err != nil {
			return err
		}
		if err := q.claim(p.ID, p.Overflow); err != nil {
			return err
		}
		for _, id := range ids {
			if id < 2 || id >= q.r.HWM || q.free.has(id) || q.used.has(id) {
				return fmt.Errorf("freelist page %d: bad or repeated free page %d", p.ID, id)
			}
			q.free.add(id)
		}
	}
	if err := q.walk("", m.Root); err != nil {
		return err
	}
	if n := q.used.n + q.free.n; q.exact && n != q.r.HWM {
		return fmt.Errorf("%d of the file's %d pages are neither in use nor free", q.r.HWM-n, q.r.HWM)
	}
	return nil
}

// meta returns the meta page bbolt uses (ReadMetas).
func (q *Result) meta() (Meta, error) {
	m, ps, err := ReadMetas(q.r.F)
	if err == nil && ps != q.r.PS {
		err = fmt.Errorf("meta pages give %d-byte pages, bbolt uses %d", ps, q.r.PS)
	}
	return m, err
}

// claim marks page id and its overflow pages as used.
func (q *Result) claim(id uint64, overflow uint32) error {
	for k := range uint64(overflow) + 1 {
		switch p := id + k; {
		case p < 2 || p >= q.r.HWM:
			return fmt.Errorf("page %d lies outside the file's %d pages", p, q.r.HWM)
		case q.used.has(p):
			return fmt.Errorf("page %d is used twice", p)
		case q.free.has(p):
			return fmt.Errorf("page %d is in use and on the freelist", p)
		default:
			q.used.add(p)
		}
	}
	return nil
}

// walk reads the tree of the bucket name rooted at page root, level by
// level: every branch page, and at the leaves' level a sample of
// q.leaves pages. The other leaves are claimed without being read.
func (q *Result) walk(name string, root uint64) error {
	level := []ref{{id: root}}
	for depth := 0; len(level) > 0; depth++ {
		slices.SortFunc(level, func(a, b ref) int { return cmp.Compare(a.id, b.id) })
		first, err := q.r.Page(level[0].id)
		if err != nil {
			return err
		}
		sample := first.Flags == pageLeaf && len(level) > q.leaves
		var next []ref
		for i, at := range level {
			if sample && !q.sampled(i, len(level)) {
				q.exact = false
				q.count(name).unread++
				if err := q.claim(at.id, 0); err != nil {
					return err
				}
				continue
			}
			p := first
			if i > 0 {
				if p, err = q.r.Page(at.id); err != nil {
					return err
				}
			}
			children, err := q.visit(name, &p, at, depth == 0)
			if err != nil {
				return err
			}
			next = append(next, children...)
		}
		level = next
	}
	return nil
}

// sampled reports whether leaf i of n is one of the q.leaves read:
// evenly spread, the first and the last included.
func (q *Result) sampled(i, n int) bool {
	k := q.leaves - 1
	j := (i*k + n - 2) / (n - 1) // the first sample at or after i
	return j*(n-1)/k == i
}

// visit checks one branch or leaf page against its place in the tree and
// returns the pages a branch points to.
func (q *Result) visit(name string, p *Page, at ref, root bool) ([]ref, error) {
	if err := q.claim(p.ID, p.Overflow); err != nil {
		return nil, err
	}
	es, err := p.Elems()
	if err != nil {
		return nil, err
	}
	if len(es) == 0 {
		if root && p.Flags == pageLeaf {
			return nil, nil // an empty bucket
		}
		return nil, fmt.Errorf("page %d is empty", p.ID)
	}
	if (at.lo != nil && string(es[0].Key) < string(at.lo)) || (at.hi != nil && string(es[len(es)-1].Key) >= string(at.hi)) {
		return nil, fmt.Errorf("page %d holds keys outside the range its parent gives it", p.ID)
	}
	if p.Flags == pageLeaf {
		return nil, q.leaf(name, es)
	}
	out := make([]ref, len(es))
	for i, e := range es {
		out[i] = ref{id: e.Child, lo: e.Key, hi: at.hi}
		if i+1 < len(es) {
			out[i].hi = es[i+1].Key
		}
	}
	return out, nil
}

// leaf checks the entries of a leaf page of bucket name ("" for the root
// bucket, which holds only buckets) and walks the buckets nested in it.
func (q *Result) leaf(name string, es []Elem) error {
	for _, e := range es {
		if e.Flags&elemBucket == 0 {
			if name == "" {
				return fmt.Errorf("the root bucket holds the key %q, which is not a bucket", e.Key)
			}
			q.count(name).n++
			if err := q.entry(name, e.Key, e.Value); err != nil {
				return fmt.Errorf("entry %x: %w", e.Key, err)
			}
			continue
		}
		child := string(e.Key)
		if name != "" {
			child = name + "/" + child
		}
		if len(e.Value) < inBucketSize {
			return fmt.Errorf("bucket %q: value of %d bytes", child, len(e.Value))
		}
		if root := binary.LittleEndian.Uint64(e.Value); root != 0 {
			if err := q.walk(child, root); err != nil {
				return fmt.Errorf("bucket %q: %w", child, err)
			}
			continue
		}
		// An inline bucket: its one leaf page follows the bucket header.
		inline := e.Value[inBucketSize:]
		if len(inline) < pageHeader {
			return fmt.Errorf("bucket %q: inline page of %d bytes", child, len(inline))
		}
		p := ParseHeader(inline)
		if p.Flags != pageLeaf {
			return fmt.Errorf("bucket %q: inline page has type %#x", child, p.Flags)
		}
		ies, err := p.Elems()
		if err != nil {
			return fmt.Errorf("bucket %q: inline %w", child, err)
		}
		if err := q.leaf(child, ies); err != nil {
			return err
		}
	}
	return nil
}

func (q *Result) count(name string) *keyCount {
	c := q.keys[name]
	if c == nil {
		c = &keyCount{}
		q.keys[name] = c
	}
	return c
}

// maxKeysPerLeaf bounds the keys of one leaf page: bbolt splits a node
// larger than a page unless it holds at most four keys, and every key
// costs at least an element and one byte.
func (q *Result) maxKeysPerLeaf() int64 {
	return max(4, int64(q.r.PS-pageHeader)/(elemSize+1))
}

// KeyRange bounds the keys of a bucket by the leaves it read and those
// it did not.
func (q *Result) KeyRange(bucket string) (lo, hi int64) {
	k := q.keys[bucket]
	if k == nil {
		return 0, 0
	}
	return k.n, k.n + k.unread*q.maxKeysPerLeaf()
}
