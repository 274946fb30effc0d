package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

// chunk is how many records a long read takes per read transaction, so that
// it never holds one long enough to stall the writer.
const chunk = 1024

// reader is the store's read side: the file and what every part reads
// of it. Its queries run in short read transactions and see only
// committed changes; the caches follow the writer's epoch. Store embeds
// it, so its methods are the Store's.
type reader struct {
	db    *bolt.DB
	path  string
	opts  Options
	log   *slog.Logger
	dmg   damage     // the first damage a read or write met (damage.go)
	epoch epoch      // directory mappings version, for read caches
	dirs  dirIDCache // directory key → id, for Get

	deferred *deferred    // the writer's deferred-run layer (pending.go)
	shelved  atomic.Int64 // records on the shelf (shelf.go)
}

// view runs fn in a read transaction. A damaged page makes bbolt panic (or
// fault, for a page outside the file); that becomes ErrCorrupt instead of
// a crash.
func (s *reader) view(fn func(tx *bolt.Tx) error) (err error) {
	defer func() { s.dmg.note(err) }()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v (run annexd check-db)", ErrCorrupt, s.path, r)
		}
	}()
	err = s.db.View(fn)
	switch {
	case errors.Is(err, bolterr.ErrDatabaseNotOpen):
		return ErrClosed
	case errors.Is(err, ErrCorrupt):
		// A record or index entry that does not decode.
		return fmt.Errorf("%w (in %s; run annexd check-db)", err, s.path)
	}
	return err
}

// Get returns the record stored for path. Its slices are copies.
func (s *reader) Get(path []byte) (Record, bool, error) {
	if err := checkPath(path, false); err != nil {
		return Record{}, false, err
	}
	var (
		r  Record
		ok bool
	)
	before := s.epoch.load()
	err := s.view(func(tx *bolt.Tx) error {
		dk, base := splitPath(path)
		id, found := s.dirID(tx, dk, before)
		if !found {
			return nil
		}
		var buf [64]byte
		v := tx.Bucket(codec.BucketFiles).Get(codec.FileKey(buf[:0], id, base))
		if v == nil {
			return nil
		}
		var err error
		r, err = codec.DecodeRecord(v)
		if err != nil {
			return fmt.Errorf("get %q: %w", path, err)
		}
		ok = true
		return nil
	})
	return r, ok, err
}

// Found is one answer of GetMany.
type Found struct {
	Record Record
	OK     bool // a record is stored for the path
}

// GetMany looks up several paths, like Get for each, but in one read
// transaction per chunk of paths, and appends the answers to out in the
// order of paths. It is much cheaper per path than Get for a batch such as
// the files of one directory. A bad path fails the whole call (ErrPath)
// before any lookup; after an error out holds no answer of the chunk that
// failed (a chunk is 1024 paths), so callers should look paths up again one
// by one rather than use a partial answer.
func (s *reader) GetMany(paths [][]byte, out []Found) ([]Found, error) {
	for _, p := range paths {
		if err := checkPath(p, false); err != nil {
			return out, err
		}
	}
	for len(paths) > 0 {
		n := min(len(paths), chunk)
		var err error
		if out, err = s.getChunk(paths[:n], out); err != nil {
			return out, err
		}
		paths = paths[n:]
	}
	return out, nil
}

func (s *reader) getChunk(paths [][]byte, out []Found) ([]Found, error) {
	start := len(out)
	order := keyOrder(paths)
	defer order.done()
	before := s.epoch.load()
	err := s.view(func(tx *bolt.Tx) error {
		out = append(out[:start], make([]Found, len(paths))...)
		// One cursor for the chunk, stepped forward through the files of
		// one directory: bbolt's Get makes a new one and seeks from the root.
		c := fileCursor{c: tx.Bucket(codec.BucketFiles).Cursor()}
		digests := make([]byte, 0, len(paths)*key.SHA256E.DigestLen()) // the records' digests
		var (
			lastDir []byte
			id      uint64
			found   bool
			buf     [64]byte
		)
		for _, k := range order.keys {
			i, p := int(k.i), paths[k.i]
			dk, base := splitPath(p)
			if lastDir == nil || !bytes.Equal(dk, lastDir) {
				id, found = s.dirID(tx, dk, before)
				lastDir = dk
				c.k = nil
			}
			if !found {
				continue
			}
			if v := c.get(codec.FileKey(buf[:0], id, base)); v != nil {
				var r Record
				var err error
				r, digests, err = codec.DecodeRecordIn(v, digests)
				if err != nil {
					return fmt.Errorf("get %q: %w", p, err)
				}
				out[start+i] = Found{Record: r, OK: true}
			}
		}
		return nil
	})
	if err != nil {
		return out[:start], err
	}
	return out, nil
}

// keyOrder returns the indexes of paths grouped by directory, each
// group's in the order of its base names: the order of their keys. A
// directory whose paths are not next to each other makes several groups.
// Give the order back with done.
func keyOrder(paths [][]byte) *order {
	o, _ := orders.Get().(*order)
	if o == nil {
		o = new(order)
	}
	o.keys = o.keys[:0]
	var last []byte
	group := int32(-1)
	for i, p := range paths {
		d, b := splitPath(p)
		if group < 0 || !bytes.Equal(d, last) {
			group++
			last = d
		}
		o.keys = append(o.keys, orderKey{group: group, i: int32(i), head: head(b)})
	}
	slices.SortFunc(o.keys, func(a, b orderKey) int {
		if c := cmp.Compare(a.group, b.group); c != 0 {
			return c
		}
		if c := cmp.Compare(a.head, b.head); c != 0 {
			return c
		}
		_, ba := splitPath(paths[a.i])
		_, bb := splitPath(paths[b.i])
		return bytes.Compare(ba, bb)
	})
	return o
}

// head is the first 8 bytes of a name as a number that sorts as they do.
func head(name []byte) uint64 {
	var b [8]byte
	copy(b[:], name)
	return binary.BigEndian.Uint64(b[:])
}

// order is a chunk's paths in key order, reused from chunk to chunk.
type order struct{ keys []orderKey }

// orderKey places one path: its directory's group, its base name's head,
// and its index among the paths asked for.
type orderKey struct {
	head  uint64
	group int32
	i     int32
}

// orders holds the orders of finished look-ups, for the next ones.
var orders sync.Pool

// done gives o back to orders.
func (o *order) done() { orders.Put(o) }

// maxStep bounds the keys a fileCursor steps over before it seeks instead.
const maxStep = 8

// fileCursor looks up keys in ascending order; k is its current key, nil
// when it must seek.
type fileCursor struct {
	c    *bolt.Cursor
	k, v []byte
}

// get returns the value stored under fk, or nil. Between two keys of one
// directory asked for in order there are few others, so it steps forward
// from the last key, and seeks only when that is far or behind.
func (fc *fileCursor) get(fk []byte) []byte {
	for n := 0; fc.k != nil && n < maxStep; n++ {
		switch c := bytes.Compare(fc.k, fk); {
		case c == 0:
			return fc.v
		case c > 0:
			return nil
		}
		fc.k, fc.v = fc.c.Next()
	}
	if fc.k == nil || bytes.Compare(fc.k, fk) < 0 {
		fc.k, fc.v = fc.c.Seek(fk)
	}
	if fc.k != nil && bytes.Equal(fc.k, fk) {
		return fc.v
	}
	return nil
}

// dirID looks up a directory's id in tx, through the cache when the epoch
// read before tx began is still current.
func (s *reader) dirID(tx *bolt.Tx, dk []byte, before uint64) (uint64, bool) {
	caching := stable(before, s.epoch.load())
	if caching {
		if id, ok := s.dirs.get(before, dk); ok {
			return id, true
		}
	}
	idv := tx.Bucket(codec.BucketDirs).Get(dk)
	if idv == nil {
		return 0, false
	}
	id, ok := codec.ParseIDKey(idv)
	if !ok {
		return 0, false
	}
	if caching {
		s.dirs.put(before, dk, id)
	}
	return id, true
}

// namer turns file keys into paths. It caches directory names across the
// read transactions of one long read, as long as the directory mappings
// stay in one epoch (see epoch).
type namer struct {
	s       *reader
	names   *bolt.Bucket
	epoch   uint64
	caching bool
	dense   bool // a listing in any order: keep ids below maxNamerCache by id
	// The names of directories with ids below maxNamerCache, by id (ids
	// are handed out in sequence, so most trees have only such), and a
	// map for the others.
	byID  [][]byte
	cache map[uint64][]byte
}

// maxNamerCache bounds the directory names a namer keeps in each of its
// caches.
const maxNamerCache = 1 << 16

func (s *reader) newNamer() *namer { return &namer{s: s, cache: map[uint64][]byte{}} }

// view runs fn in a read transaction with n pointed at it.
func (n *namer) view(fn func(tx *bolt.Tx, n *namer) error) error {
	before := n.s.epoch.load()
	return n.s.view(func(tx *bolt.Tx) error {
		after := n.s.epoch.load()
		n.names = tx.Bucket(codec.BucketDirNames)
		n.caching = stable(before, after)
		if n.caching && before != n.epoch {
			n.epoch = before
			clear(n.cache)
			n.byID = n.byID[:0]
		}
		return fn(tx, n)
	})
}

func (n *namer) path(fk []byte) ([]byte, error) {
	id, base, ok := codec.SplitFileKey(fk)
	if !ok {
		return nil, fmt.Errorf("%w: bad file key %x", ErrCorrupt, fk)
	}
	dk, err := n.dir(id)
	if err != nil {
		return nil, err
	}
	return joinPath(dk, base), nil
}

// dir returns the key of directory id ("/a/b/"), valid while n's
// transaction is.
func (n *namer) dir(id uint64) ([]byte, error) {
	if dk := n.cached(id); dk != nil {
		return dk, nil
	}
	dk := n.names.Get(codec.IDKey(id))
	if dk == nil {
		return nil, fmt.Errorf("%w: directory %d missing", ErrCorrupt, id)
	}
	if n.caching {
		n.keep(id, bytes.Clone(dk))
	}
	return dk, nil
}

// cached returns the name of directory id when the caches hold it.
func (n *namer) cached(id uint64) []byte {
	switch {
	case !n.caching:
		return nil
	case id < uint64(len(n.byID)):
		return n.byID[id]
	}
	return n.cache[id]
}

// keep caches the name dk of directory id. The slice grows only while ids
// come about in order (a listing): a namer made for one look-up would
// otherwise allocate a slot for every id below the one it met.
func (n *namer) keep(id uint64, dk []byte) {
	if id >= maxNamerCache || !n.dense && id > 2*uint64(len(n.byID))+64 {
		if len(n.cache) >= maxNamerCache {
			clear(n.cache)
		}
		n.cache[id] = dk
		return
	}
	if id >= uint64(len(n.byID)) {
		n.byID = append(n.byID, make([][]byte, int(id)+1-len(n.byID))...)
	}
	n.byID[id] = dk
}

// ByInodeAll returns every path recorded with (dev, ino), in index order:
// those of the inode index and those whose entry is deferred
// (pendinodes.go).
func (s *reader) ByInodeAll(dev, ino uint64) ([][]byte, error) {
	var ps [][]byte
	err := s.newNamer().view(func(tx *bolt.Tx, n *namer) error {
		p := codec.InodeKey(nil, dev, ino)
		var fks [][]byte
		c := tx.Bucket(codec.BucketInodes).Cursor()
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			fks = append(fks, k[len(p):])
		}
		if b := tx.Bucket(codec.BucketPendInodes); s.deferred.mayHoldInode(b, p) {
			err := pendingByInode(b, p, func(fk []byte) error {
				fks = append(fks, fk)
				return nil
			})
			if err != nil {
				return err
			}
		}
		slices.SortFunc(fks, bytes.Compare)
		for _, fk := range slices.CompactFunc(fks, bytes.Equal) { // in both after a merge cut short
			path, err := n.path(fk)
			if err != nil {
				return err
			}
			ps = append(ps, path)
		}
		return nil
	})
	return ps, err
}

// ByDigest returns the paths whose content has digest under backend b.
// Digests are grouped by base backend: SHA256E and SHA256 share one space,
// so files named a.JPG and b.jpg with the same bytes are found together.
// Only records in StateOK are indexed by digest.
func (s *reader) ByDigest(b key.Backend, digest []byte) ([][]byte, error) {
	if !b.Valid() || len(digest) != b.DigestLen() {
		return nil, fmt.Errorf("%w: %d-byte digest for backend %s", ErrRecord, len(digest), b)
	}
	var out [][]byte
	err := s.newNamer().view(func(tx *bolt.Tx, n *namer) error {
		p := append([]byte{byte(b.Base())}, digest...)
		var fks [][]byte
		c := tx.Bucket(codec.BucketDigest).Cursor()
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			fks = append(fks, k[len(p):])
		}
		if k, _ := tx.Bucket(codec.BucketPending).Cursor().First(); k != nil { // this snapshot's, not the counter
			err := pendingByDigest(tx, p, func(fk []byte) error {
				fks = append(fks, fk)
				return nil
			})
			if err != nil {
				return err
			}
			slices.SortFunc(fks, bytes.Compare) // the order they will have once merged
			fks = slices.CompactFunc(fks, bytes.Equal)
		}
		for _, fk := range fks {
			path, err := n.path(fk)
			if err != nil {
				return err
			}
			out = append(out, path)
		}
		return nil
	})
	return out, err
}

type entry struct {
	key, path []byte
	r         Record
}

func makeEntry(n *namer, k, v []byte) (entry, error) {
	path, err := n.path(k)
	if err != nil {
		return entry{}, err
	}
	r, err := codec.DecodeRecord(v)
	if err != nil {
		return entry{}, fmt.Errorf("record of %q: %w", path, err)
	}
	return entry{key: bytes.Clone(k), path: path, r: r}, nil
}

// Subtree calls fn for dir itself (when it is a file) and every record
// below it, in chunks of short read transactions, outside of them. fn may
// return ErrStop to end early.
func (s *reader) Subtree(ctx context.Context, dir []byte, fn func(path []byte, r Record) error) error {
	if err := checkPath(dir, true); err != nil {
		return err
	}
	err := s.subtree(ctx, dir, fn)
	if errors.Is(err, ErrStop) {
		return nil
	}
	return err
}

// HasUnder reports whether the index may hold records strictly under
// directory dir: whether it knows a directory at or below it. One seek, for
// a check on every new file (the indexer's dropUnder). Every record's
// directory has a directory key, so false is exact; true asks for Subtree.
func (s *reader) HasUnder(dir []byte) (bool, error) {
	if err := checkPath(dir, true); err != nil {
		return false, err
	}
	pre := subtreePrefix(dir)
	var found bool
	err := s.view(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(codec.BucketDirs).Cursor().Seek(pre)
		found = k != nil && bytes.HasPrefix(k, pre)
		return nil
	})
	return found, err
}

func (s *reader) subtree(ctx context.Context, dir []byte, fn func(path []byte, r Record) error) error {
	if len(dir) > 1 {
		r, ok, err := s.Get(dir)
		if err != nil {
			return err
		}
		if ok {
			if err := fn(bytes.Clone(dir), r); err != nil {
				return err
			}
		}
	}
	st := subtreeState{prefix: subtreePrefix(dir), names: s.newNamer()}
	st.dir = st.prefix
	for !st.done {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := s.subtreeChunk(&st)
		if err != nil {
			return err
		}
		for _, e := range batch {
			if err := fn(e.path, e.r); err != nil {
				return err
			}
		}
	}
	return nil
}

// subtreeState is where a chunked subtree walk resumes: the directory key
// and the file key within it.
type subtreeState struct {
	prefix, dir, file []byte
	done              bool
	names             *namer
}

func (s *reader) subtreeChunk(st *subtreeState) ([]entry, error) {
	var batch []entry
	err := st.names.view(func(tx *bolt.Tx, n *namer) error {
		files := tx.Bucket(codec.BucketFiles).Cursor()
		dc := tx.Bucket(codec.BucketDirs).Cursor()
		for dk, idv := dc.Seek(st.dir); dk != nil && bytes.HasPrefix(dk, st.prefix); dk, idv = dc.Next() {
			p := bytes.Clone(idv)
			start := p
			if st.file != nil && bytes.HasPrefix(st.file, p) && bytes.Equal(dk, st.dir) {
				start = st.file
			}
			for k, v := files.Seek(start); k != nil && bytes.HasPrefix(k, p); k, v = files.Next() {
				if len(batch) == chunk {
					st.dir, st.file = bytes.Clone(dk), bytes.Clone(k)
					return nil
				}
				e, err := makeEntry(n, k, v)
				if err != nil {
					return err
				}
				batch = append(batch, e)
			}
			st.file = nil
		}
		st.done = true
		return nil
	})
	return batch, err
}

// Stats are the index's totals.
type Stats struct {
	Files       int64  // records
	Bytes       int64  // sum of their sizes
	Digested    int64  // records in StateOK with a digest
	Unique      int64  // distinct digests among them
	DupGroups   int64  // digests with at least two distinct inodes
	Duplicate   int64  // the bytes of their extra copies: size × (inodes − 1), shared or not
	Generation  uint64 // last scan generation handed out
	IndexBytes  int64  // bytes of the index file in use (bbolt's high-water mark)
	SchemaVer   uint64
	CreatedUnix int64 // ns
	Ungrouped   int64 // digested records not yet counted in Unique, DupGroups and Duplicate (pending.go)

	// Surveyed counts the groups with a survey of block sharing made
	// since their last change, SurveyedDup their Duplicate bytes, and
	// Reclaimable what those surveys found reclaimable. What the other
	// groups would give back is not known; about Duplicate − SurveyedDup
	// at most.
	Surveyed, SurveyedDup, Reclaimable int64
	Shelved                            int64 // records of file systems not where they were (shelf.go), in no total above
}

// Stats returns the totals, kept up to date by every write (O(1)).
func (s *reader) Stats() (Stats, error) {
	var st Stats
	err := s.view(func(tx *bolt.Tx) error {
		m := tx.Bucket(codec.BucketMeta)
		c, err := decodeCounters(m.Get(codec.MetaCounters))
		if err != nil {
			return err
		}
		st = Stats{Files: c.Files, Bytes: c.Bytes, Digested: c.Digested, Unique: c.Unique,
			DupGroups: c.Groups, Duplicate: c.Duplicate, IndexBytes: tx.Size(), Ungrouped: s.Ungrouped(),
			Shelved: c.Shelved}
		st.Surveyed, st.SurveyedDup, st.Reclaimable = c.Surveyed, c.SurveyedDup, c.Reclaimable
		st.Generation, _ = binary.Uvarint(m.Get(codec.MetaGeneration))
		st.SchemaVer, _ = binary.Uvarint(m.Get(codec.MetaSchema))
		st.CreatedUnix, _ = binary.Varint(m.Get(codec.MetaCreated))
		return nil
	})
	return st, err
}

// Committed returns the id of the last write transaction committed: it
// grows with every commit, so a count made at one id still holds while
// Committed returns the same.
func (s *reader) Committed() (uint64, error) {
	var id uint64
	err := s.view(func(tx *bolt.Tx) error {
		id = uint64(tx.ID())
		return nil
	})
	return id, err
}

// GetMeta returns the value stored under name by PutMeta.
func (s *reader) GetMeta(name string) ([]byte, bool, error) {
	var (
		v  []byte
		ok bool
	)
	err := s.view(func(tx *bolt.Tx) error {
		k, val := tx.Bucket(codec.BucketUser).Cursor().Seek([]byte(name))
		if ok = k != nil && string(k) == name; ok {
			v = append([]byte{}, val...)
		}
		return nil
	})
	return v, ok, err
}
