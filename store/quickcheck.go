package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

// quickLeaves is how many leaf pages of each bucket the check at open
// reads, spread evenly over the bucket; smaller buckets are read whole.
var quickLeaves = 128

// quickCheck is the check at open. It reads what can be checked without
// reading the whole index: both meta pages, the freelist, every branch
// page, and a sample of each bucket's leaves, whose entries must decode.
// Every page it meets must lie below the high-water mark and be used
// once. The stored counters must match the keys it counted: exactly when
// every leaf was read, within bounds otherwise. It reports damage as
// ErrCorrupt; Check reads everything.
func quickCheck(db *bolt.DB, path string) error {
	_, err := runQuick(db, path)
	return err
}

// runQuick is quickCheck; it also returns what the check read.
func runQuick(db *bolt.DB, path string) (*quick, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	defer f.Close()
	q := &quick{r: pageReader{f: f, ps: db.Info().PageSize}, exact: true, keys: map[string]*keyCount{}}
	if err := q.run(db); err != nil {
		return q, fmt.Errorf("%w: %s: %v (found by the check at open; the file is left untouched)", ErrCorrupt, path, err)
	}
	return q, nil
}

// quick is the state of one quickCheck.
type quick struct {
	r     pageReader
	used  pageSet // meta, freelist and tree pages met so far
	free  pageSet // the freelist's ids
	exact bool    // every leaf was read, so used is complete
	keys  map[string]*keyCount
}

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

func (q *quick) run(db *bolt.DB) error {
	m, err := q.meta()
	if err != nil {
		return err
	}
	q.r.hwm = m.pgid
	q.used, q.free = newPageSet(m.pgid), newPageSet(m.pgid)
	q.used.add(0)
	q.used.add(1)
	if m.freelist != noFreelist {
		p, ids, err := q.r.freelist(m.freelist)
		if err != nil {
			return err
		}
		if err := q.claim(p.id, p.overflow); err != nil {
			return err
		}
		for _, id := range ids {
			if id < 2 || id >= q.r.hwm || q.free.has(id) || q.used.has(id) {
				return fmt.Errorf("freelist page %d: bad or repeated free page %d", p.id, id)
			}
			q.free.add(id)
		}
	}
	if err := q.walk("", m.root); err != nil {
		return err
	}
	if n := q.used.n + q.free.n; q.exact && n != q.r.hwm {
		return fmt.Errorf("%d of the file's %d pages are neither in use nor free", q.r.hwm-n, q.r.hwm)
	}
	return q.counters(db)
}

// meta returns the meta page bbolt uses (readMetas).
func (q *quick) meta() (boltMeta, error) {
	m, ps, err := readMetas(q.r.f)
	if err == nil && ps != q.r.ps {
		err = fmt.Errorf("meta pages give %d-byte pages, bbolt uses %d", ps, q.r.ps)
	}
	return m, err
}

// readMetas returns the meta page bbolt uses and the page size, found as
// bbolt finds them: the size from the first valid meta page, page 0 or a
// page 1 at 1 KiB × 2^i; then the valid meta with the higher transaction.
func readMetas(f *os.File) (boltMeta, int, error) {
	read := func(off int64) boltMeta {
		b := make([]byte, pageHeader+boltMetaSum+8)
		if _, err := f.ReadAt(b, off); err != nil {
			return boltMeta{}
		}
		m, _ := readBoltMeta(b)
		return m
	}
	ps := 0
	if m := read(0); m.valid {
		ps = int(m.pageSize)
	}
	for i := 0; ps == 0 && i <= 14; i++ {
		if m := read(1024 << i); m.valid {
			ps = int(m.pageSize)
		}
	}
	if ps < 512 || ps > 1<<24 {
		return boltMeta{}, 0, errors.New("no valid meta page")
	}
	var best boltMeta
	for _, m := range []boltMeta{read(0), read(int64(ps))} {
		if m.valid && int(m.pageSize) == ps && (!best.valid || m.txid > best.txid) {
			best = m
		}
	}
	if !best.valid {
		return best, 0, errors.New("no valid meta page")
	}
	return best, ps, nil
}

// checkFreelist checks the freelist page before bbolt reads it: bbolt
// panics on a damaged one while it holds the file mapped, and the mapping
// keeps the file's lock until the process ends.
func checkFreelist(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("store: open index: %w", err)
	}
	defer f.Close()
	m, ps, err := readMetas(f)
	if err != nil || m.freelist == noFreelist {
		return nil // the header check and bbolt report a bad meta page
	}
	r := pageReader{f: f, ps: ps, hwm: m.pgid}
	if _, _, err := r.freelist(m.freelist); err != nil {
		return fmt.Errorf("%w: %s: %v (left untouched)", ErrCorrupt, path, err)
	}
	return nil
}

// claim marks page id and its overflow pages as used.
func (q *quick) claim(id uint64, overflow uint32) error {
	for k := range uint64(overflow) + 1 {
		switch p := id + k; {
		case p < 2 || p >= q.r.hwm:
			return fmt.Errorf("page %d lies outside the file's %d pages", p, q.r.hwm)
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
// quickLeaves pages. The other leaves are claimed without being read.
func (q *quick) walk(name string, root uint64) error {
	level := []ref{{id: root}}
	for depth := 0; len(level) > 0; depth++ {
		slices.SortFunc(level, func(a, b ref) int { return cmp.Compare(a.id, b.id) })
		first, err := q.r.page(level[0].id)
		if err != nil {
			return err
		}
		sample := first.flags == pageLeaf && len(level) > quickLeaves
		var next []ref
		for i, at := range level {
			if sample && !sampled(i, len(level)) {
				q.exact = false
				q.count(name).unread++
				if err := q.claim(at.id, 0); err != nil {
					return err
				}
				continue
			}
			p := first
			if i > 0 {
				if p, err = q.r.page(at.id); err != nil {
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

// sampled reports whether leaf i of n is one of the quickLeaves read:
// evenly spread, the first and the last included.
func sampled(i, n int) bool {
	k := quickLeaves - 1
	j := (i*k + n - 2) / (n - 1) // the first sample at or after i
	return j*(n-1)/k == i
}

// visit checks one branch or leaf page against its place in the tree and
// returns the pages a branch points to.
func (q *quick) visit(name string, p *rawPage, at ref, root bool) ([]ref, error) {
	if err := q.claim(p.id, p.overflow); err != nil {
		return nil, err
	}
	es, err := p.elems()
	if err != nil {
		return nil, err
	}
	if len(es) == 0 {
		if root && p.flags == pageLeaf {
			return nil, nil // an empty bucket
		}
		return nil, fmt.Errorf("page %d is empty", p.id)
	}
	if (at.lo != nil && string(es[0].key) < string(at.lo)) || (at.hi != nil && string(es[len(es)-1].key) >= string(at.hi)) {
		return nil, fmt.Errorf("page %d holds keys outside the range its parent gives it", p.id)
	}
	if p.flags == pageLeaf {
		return nil, q.leaf(name, es)
	}
	out := make([]ref, len(es))
	for i, e := range es {
		out[i] = ref{id: e.child, lo: e.key, hi: at.hi}
		if i+1 < len(es) {
			out[i].hi = es[i+1].key
		}
	}
	return out, nil
}

// leaf checks the entries of a leaf page of bucket name ("" for the root
// bucket, which holds only buckets) and walks the buckets nested in it.
func (q *quick) leaf(name string, es []elem) error {
	for _, e := range es {
		if e.flags&elemBucket == 0 {
			if name == "" {
				return fmt.Errorf("the root bucket holds the key %q, which is not a bucket", e.key)
			}
			q.count(name).n++
			if err := checkEntry(name, e.key, e.value); err != nil {
				return fmt.Errorf("entry %x: %w", e.key, err)
			}
			continue
		}
		child := string(e.key)
		if name != "" {
			child = name + "/" + child
		}
		if len(e.value) < inBucketSize {
			return fmt.Errorf("bucket %q: value of %d bytes", child, len(e.value))
		}
		if root := binary.LittleEndian.Uint64(e.value); root != 0 {
			if err := q.walk(child, root); err != nil {
				return fmt.Errorf("bucket %q: %w", child, err)
			}
			continue
		}
		// An inline bucket: its one leaf page follows the bucket header.
		inline := e.value[inBucketSize:]
		if len(inline) < pageHeader {
			return fmt.Errorf("bucket %q: inline page of %d bytes", child, len(inline))
		}
		p := parseHeader(inline)
		if p.flags != pageLeaf {
			return fmt.Errorf("bucket %q: inline page has type %#x", child, p.flags)
		}
		ies, err := p.elems()
		if err != nil {
			return fmt.Errorf("bucket %q: inline %w", child, err)
		}
		if err := q.leaf(child, ies); err != nil {
			return err
		}
	}
	return nil
}

func (q *quick) count(name string) *keyCount {
	c := q.keys[name]
	if c == nil {
		c = &keyCount{}
		q.keys[name] = c
	}
	return c
}

// checkEntry decodes one entry of the bucket name, as Check does.
func checkEntry(name string, k, v []byte) error {
	switch name {
	case string(bucketFiles):
		if _, base, ok := codec.SplitFileKey(k); !ok || len(base) == 0 || bytes.IndexByte(base, '/') >= 0 {
			return errors.New("bad file key")
		}
		r, err := codec.DecodeRecord(v)
		if err == nil {
			err = r.Validate()
		}
		return err
	case string(bucketDirs):
		if _, ok := codec.ParseIDKey(v); !ok || k[len(k)-1] != '/' {
			return errors.New("bad directory entry")
		}
	case string(bucketDirNames):
		if _, ok := codec.ParseIDKey(k); !ok || len(v) == 0 || v[len(v)-1] != '/' {
			return errors.New("bad directory name entry")
		}
	case string(bucketDigest):
		if b := key.Backend(k[0]); !b.Valid() || b.Base() != b || len(k) <= 1+b.DigestLen() {
			return errors.New("bad digest index key")
		}
		if b, _, _, err := codec.DecodeDigestValue(v); err != nil || b.Base() != key.Backend(k[0]) {
			return errors.New("bad digest index value")
		}
	case string(bucketGroups), string(bucketDups):
		_, err := decodeGroup(v)
		return err
	case string(bucketSurveys):
		_, _, _, err := decodeSurvey(v)
		return err
	}
	return nil
}

// maxKeysPerLeaf bounds the keys of one leaf page: bbolt splits a node
// larger than a page unless it holds at most four keys, and every key
// costs at least an element and one byte.
func (q *quick) maxKeysPerLeaf() int64 {
	return max(4, int64(q.r.ps-pageHeader)/(elemSize+1))
}

// counters compares the stored counters with the keys counted.
func (q *quick) counters(db *bolt.DB) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("counters unreadable: %v", r)
		}
	}()
	var c counters
	err = db.View(func(tx *bolt.Tx) error {
		var err error
		c, err = decodeCounters(tx.Bucket(bucketMeta).Get(metaCounters))
		return err
	})
	if err != nil {
		return fmt.Errorf("counters: %w", err)
	}
	if c.Files < 0 || c.Bytes < 0 || c.Duplicate < 0 || c.Digested < 0 || c.Digested > c.Files ||
		c.Unique > c.Digested || c.Groups < 0 || c.Groups > c.Unique ||
		c.Surveyed < 0 || c.Surveyed > c.Groups || c.SurveyedDup < 0 || c.SurveyedDup > c.Duplicate || c.Reclaimable < 0 {
		return fmt.Errorf("counters %+v are impossible", c)
	}
	// Digested counts the pending entries too, merged or not (pending.go).
	// Files counts the records whose inode entries are deferred
	// (pendinodes.go).
	_, pendHi := q.keyRange(bucketPending)
	_, pendInoHi := q.keyRange(bucketPendInodes)
	for _, b := range []struct {
		bucket []byte
		want   int64
		slack  int64
	}{{bucketFiles, c.Files, 0}, {bucketInodes, c.Files, pendInoHi}, {bucketDigest, c.Digested, pendHi}, {bucketDups, c.Groups, 0}, {bucketSurveys, c.Surveyed, 0}} {
		lo, hi := q.keyRange(b.bucket)
		if b.want < lo || b.want-b.slack > hi {
			return fmt.Errorf("bucket %q holds %d to %d keys, the counters say %d", b.bucket, lo, hi, b.want)
		}
	}
	return nil
}

// keyRange bounds the keys of a bucket by the leaves read and unread.
func (q *quick) keyRange(bucket []byte) (lo, hi int64) {
	k := q.keys[string(bucket)]
	if k == nil {
		return 0, 0
	}
	return k.n, k.n + k.unread*q.maxKeysPerLeaf()
}
