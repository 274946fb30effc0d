package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// counters are the totals kept in meta so Stats is O(1).
// Schema 7 added the three survey counters and Shelved; an index of
// schema 6 keeps six until its first write.
type counters struct {
	Files, Bytes, Digested, Unique, Groups, Duplicate int64
	// Surveyed counts the groups with a survey (survey.go), SurveyedDup
	// their duplicate bytes and Reclaimable what their surveys found
	// reclaimable.
	Surveyed, SurveyedDup, Reclaimable int64
	Shelved                            int64 // records on the shelf (shelf.go)
}

func (c *counters) fields() []*int64 {
	return []*int64{&c.Files, &c.Bytes, &c.Digested, &c.Unique, &c.Groups, &c.Duplicate,
		&c.Surveyed, &c.SurveyedDup, &c.Reclaimable, &c.Shelved}
}

// oldCounters is how many counters schema 6 kept.
const oldCounters = 6

func (c *counters) encode() []byte {
	b := make([]byte, 0, 10*binary.MaxVarintLen64)
	for _, p := range c.fields() {
		b = binary.AppendVarint(b, *p)
	}
	return b
}

func decodeCounters(b []byte) (counters, error) {
	var c counters
	d := &codec.Decoder{B: b}
	for i, p := range c.fields() {
		if i == oldCounters && len(d.B) == 0 {
			break
		}
		*p = d.Varint()
	}
	if len(b) == 0 {
		return counters{}, nil
	}
	return c, d.Err
}

// group is the summary of one digest's paths, kept for groups of ≥ 2 paths.
type group struct {
	n, inodes int64 // paths; distinct (dev, ino) among them
	size      int64
}

func (g group) duplicate() int64 {
	if g.inodes < 2 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(g.size), uint64(g.inodes-1))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64 // absurd sizes saturate instead of wrapping
	}
	return int64(lo)
}

func (g group) encode() []byte {
	return codec.AppendUvarints(nil, uint64(g.n), uint64(g.inodes), uint64(g.size))
}

func decodeGroup(b []byte) (group, error) {
	d := &codec.Decoder{B: b}
	g := group{n: int64(d.Uvarint()), inodes: int64(d.Uvarint()), size: int64(d.Uvarint())}
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%w: trailing bytes in group", ErrCorrupt)
	}
	return g, d.Err
}

// wtx applies changes inside one bbolt write transaction, keeping every
// index consistent.
type wtx struct {
	tx                                                      *bolt.Tx
	meta, user, files, dirs, dirNames, digest, inodes, grps *bolt.Bucket
	dups                                                    *bolt.Bucket
	c, c0                                                   counters
	ibuf, dbuf                                              []byte
	dirCache                                                map[string]uint64 // dir key → id, this tx only
	epoch                                                   *epoch
	// digestCur is reused for lookups in the digest index; every use
	// starts with a Seek, which repositions it after writes.
	digestCur *bolt.Cursor
	// newDirs maps the ids of directories created in this transaction to
	// the largest base name put in them so far. Ids are never reused, so
	// a larger name has no record yet: a first scan, which meets names in
	// order, needs no lookup before each put.
	newDirs map[uint64][]byte
	// tails watch the buckets that a first scan appends to.
	tails    [3]*tail
	verified txVerified // its side of the verified index (verified.go)
	log      *txLog     // the change log, nil when not kept (changes.go)
	feed     *feedTx    // the change feed, nil when not kept (feedtx.go)

	runs txRuns // this transaction's side of the deferred runs (pending.go)

	fences  *fenceSet // the store's raised fences, which applied changes break
	shelf   *bolt.Bucket
	surveys txSurveys // its side of the surveys (survey.go)

	mapTrim *mapTrim   // unmaps the index above budget (maptrim.go); nil in tests
	uses    *mountUses // the mounts of the records hashed lately (kept.go); nil in tests
	applied int        // changes or merged entries so far, for mapTrim
}

// tick counts one change applied or entry merged, and every trimEvery
// trims the map when over budget by trimSlack: a transaction of random
// inserts maps a new page for almost every change, 16 MiB for a group of
// 4,096.
func (w *wtx) tick() {
	w.applied++
	if w.mapTrim != nil && int64(w.applied)%w.mapTrim.every.Load() == 0 {
		w.mapTrim.trimAbove(w.tx, w.mapTrim.slack.Load())
	}
}

// newWtx begins applying changes in tx; bufs are the writer's buffers
// for the entries written in key order at the end (txbuf.go), emptied
// here.
func newWtx(tx *bolt.Tx, e *epoch, bufs *[3]keyBuf) (*wtx, error) {
	for i := range bufs {
		bufs[i].reset()
	}
	w := &wtx{tx: tx, epoch: e, verified: txVerified{tx: tx, run: &bufs[2]}, runs: txRuns{dig: &bufs[0], ino: &bufs[1], pendIno: tx.Bucket(codec.BucketPendInodes)},
		meta: tx.Bucket(codec.BucketMeta), user: tx.Bucket(codec.BucketUser), files: tx.Bucket(codec.BucketFiles),
		dirs: tx.Bucket(codec.BucketDirs), dirNames: tx.Bucket(codec.BucketDirNames), digest: tx.Bucket(codec.BucketDigest),
		inodes: tx.Bucket(codec.BucketInodes), grps: tx.Bucket(codec.BucketGroups), dups: tx.Bucket(codec.BucketDups),
		shelf: tx.Bucket(codec.BucketShelf),
	}
	w.tails = [...]*tail{newTail(w.files), newTail(w.dirNames), newTail(w.inodes)}
	w.digestCur = w.digest.Cursor()
	w.surveys = txSurveys{tx: tx, c: &w.c, grps: w.grps, files: w.files, digest: w.digest}
	c, err := decodeCounters(w.meta.Get(codec.MetaCounters))
	w.c, w.c0 = c, c
	w.dirCache = make(map[string]uint64)
	w.newDirs = make(map[uint64][]byte)
	return w, err
}

// finish writes the counters back and sets how full the pages of each
// bucket are written.
func (w *wtx) finish() error {
	for _, t := range w.tails {
		t.setFill()
	}
	if err := w.verified.flush(); err != nil {
		return err
	}
	if err := w.runs.flush(); err != nil {
		return err
	}
	if err := w.log.flush(w.c.Files); err != nil {
		return err
	}
	if err := w.feed.flush(); err != nil {
		return err
	}
	if w.c == w.c0 {
		return nil
	}
	return w.meta.Put(codec.MetaCounters, w.c.encode())
}

// dirID returns the id of a directory key, or 0 when it holds no files.
func (w *wtx) dirID(dirKey []byte) uint64 {
	if id, ok := w.dirCache[string(dirKey)]; ok {
		return id
	}
	v := w.dirs.Get(dirKey)
	if v == nil {
		return 0
	}
	id, ok := codec.ParseIDKey(v)
	if !ok {
		return 0
	}
	if len(w.dirCache) > 4096 {
		clear(w.dirCache)
	}
	w.dirCache[string(dirKey)] = id
	return id
}

// forgetDir drops a directory from the caches when its entry changes or
// goes away.
func (w *wtx) forgetDir(dirKey []byte) {
	delete(w.dirCache, string(dirKey))
	w.epoch.begin()
}

func (w *wtx) ensureDir(dirKey []byte) (uint64, error) {
	if id := w.dirID(dirKey); id != 0 {
		return id, nil
	}
	id, err := w.dirs.NextSequence()
	if err != nil {
		return 0, err
	}
	v := codec.IDKey(id)
	if err := w.dirs.Put(bytes.Clone(dirKey), v); err != nil {
		return 0, err
	}
	w.newDirs[id] = nil
	return id, w.tails[1].put(v, bytes.Clone(dirKey))
}

// dropDirIfEmpty removes a directory's entries once it holds no files.
func (w *wtx) dropDirIfEmpty(id uint64, dirKey []byte) error {
	p := codec.IDKey(id)
	if k, _ := w.files.Cursor().Seek(p); k != nil && bytes.HasPrefix(k, p) {
		return nil
	}
	w.forgetDir(dirKey)
	if err := w.dirs.Delete(dirKey); err != nil {
		return err
	}
	return w.dirNames.Delete(p)
}

// lookup returns the file key and record stored for path.
func (w *wtx) lookup(path []byte) (fk []byte, r Record, ok bool, err error) {
	dk, base := splitPath(path)
	id := w.dirID(dk)
	if id == 0 {
		return nil, r, false, nil
	}
	fk = codec.FileKey(nil, id, base)
	v := w.files.Get(fk)
	if v == nil {
		return nil, r, false, nil
	}
	r, err = codec.DecodeRecord(v)
	return fk, r, true, err
}

// put stores r at path, replacing what was there.
func (w *wtx) put(path []byte, r *Record) error {
	if w.uses != nil && r.State == StateOK {
		w.uses.note(r.Dev, r.HashedAt)
	}
	if err := w.unshelf(path, r); err != nil {
		return err
	}
	dk, base := splitPath(path)
	id, err := w.ensureDir(dk)
	if err != nil {
		return err
	}
	fk := codec.FileKey(nil, id, base)
	if v := w.existing(id, base, fk); v != nil {
		old, err := codec.DecodeRecord(v)
		if err != nil {
			return fmt.Errorf("replace %q: %w", path, err)
		}
		if sameIndexes(&old, r) {
			// Only timestamps, state within ok or generation changed (a
			// re-verification, a refreshed mtime): the indexes stay.
			if err := w.verified.reindex(fk, &old, r); err != nil {
				return err
			}
			if err := w.rewritten(&old, r); err != nil {
				return err
			}
			return w.tails[0].put(fk, codec.AppendRecord(make([]byte, 0, codec.MaxRecordLen), r))
		}
		if err := w.unindex(fk, &old); err != nil {
			return err
		}
	}
	// bbolt keeps a reference to values until the commit: never reuse them.
	if err := w.tails[0].put(fk, codec.AppendRecord(make([]byte, 0, codec.MaxRecordLen), r)); err != nil {
		return err
	}
	return w.index(fk, r)
}

// existing returns the stored record value of fk (directory id, base) for
// a put, skipping the lookup where newDirs shows there is none.
func (w *wtx) existing(id uint64, base, fk []byte) []byte {
	if max, ok := w.newDirs[id]; ok {
		if bytes.Compare(base, max) > 0 {
			w.newDirs[id] = base
			return nil
		}
	}
	return w.files.Get(fk)
}

// rewritten drops the survey of the group of a record whose file was
// written again with the same content: its blocks may have changed.
func (w *wtx) rewritten(old, r *Record) error {
	if !old.Indexed() || (old.MtimeNs == r.MtimeNs && old.CtimeNs == r.CtimeNs) {
		return nil
	}
	return w.surveys.drop(digestKey(nil, old))
}

// sameIndexes reports whether a and b have the same entries in every index
// and count the same in the counters. The digest index holds the backend,
// so SHA256 and SHA256E records of one digest differ.
func sameIndexes(a, b *Record) bool {
	if a.Dev != b.Dev || a.Ino != b.Ino || a.Size != b.Size || a.Indexed() != b.Indexed() {
		return false
	}
	return !a.Indexed() || (a.Backend == b.Backend && bytes.Equal(a.Digest, b.Digest))
}

// remove deletes the record at path; it reports whether there was one.
func (w *wtx) remove(path []byte) (bool, error) {
	fk, r, ok, err := w.lookup(path)
	if !ok || err != nil {
		return false, err
	}
	return true, w.removeKey(fk, &r)
}

func (w *wtx) removeKey(fk []byte, r *Record) error {
	if err := w.unindex(fk, r); err != nil {
		return err
	}
	if err := w.files.Delete(fk); err != nil {
		return err
	}
	id, _, _ := codec.SplitFileKey(fk)
	dk := w.dirNames.Get(codec.IDKey(id))
	if dk == nil {
		return fmt.Errorf("%w: directory %d of a record is missing", ErrCorrupt, id)
	}
	return w.dropDirIfEmpty(id, bytes.Clone(dk))
}

func (w *wtx) index(fk []byte, r *Record) error {
	if err := w.logIndexed(fk, r, true); err != nil {
		return err
	}
	if err := w.feedRecord(fk, r, true); err != nil {
		return err
	}
	w.verified.index(fk, r)
	w.c.Files++
	w.c.Bytes += r.Size
	w.ibuf = codec.InodeKey(w.ibuf, r.Dev, r.Ino)
	prefix := len(w.ibuf)
	w.ibuf = append(w.ibuf, fk...)
	deferred := w.runs.deferring && r.Indexed()
	if deferred {
		w.runs.deferInode(w.ibuf, prefix) // with its digest entry (pendinodes.go)
	} else if err := w.tails[2].put(w.ibuf, nil); err != nil {
		return err
	}
	if !r.Indexed() {
		return nil
	}
	w.c.Digested++
	dk := digestKey(nil, r)
	if deferred {
		w.runs.deferDigest(dk, fk, r)
		return nil
	}
	return w.addDigest(dk, fk, r)
}

func (w *wtx) unindex(fk []byte, r *Record) error {
	if err := w.logIndexed(fk, r, false); err != nil {
		return err
	}
	if err := w.feedRecord(fk, r, false); err != nil {
		return err
	}
	if err := w.verified.unindex(fk, r); err != nil {
		return err
	}
	w.c.Files--
	w.c.Bytes -= r.Size
	w.ibuf = append(codec.InodeKey(w.ibuf, r.Dev, r.Ino), fk...)
	if err := w.inodes.Delete(w.ibuf); err != nil {
		return err
	}
	if !r.Indexed() {
		return nil
	}
	w.c.Digested--
	dk := digestKey(nil, r)
	if w.runs.any() {
		// A pending entry is dropped, with its deferred inode entry if it
		// has one (pendinodes.go); one also merged (a merge cut short) is
		// dropped from both indexes.
		merged := w.inDigest(dk, fk)
		if !merged || w.runs.mergeSkip {
			dropped, err := w.runs.dropDigest(dk, fk)
			if err == nil && dropped {
				err = w.runs.dropInode(append(codec.InodeKey(w.ibuf, r.Dev, r.Ino), fk...))
			}
			if err != nil || (dropped && !merged) {
				return err
			}
		}
	}
	g, err := w.groupOf(dk, r)
	if err != nil {
		return err
	}
	old := g
	g.n--
	if g.n == 0 || !w.sharesInode(dk, fk, r) {
		g.inodes--
	}
	if err := w.setGroup(dk, old, g); err != nil {
		return err
	}
	return w.digest.Delete(append(dk, fk...))
}

// groupOf returns the summary of digest dk as stored, or as derived from
// the bydigest index for groups of fewer than two paths.
func (w *wtx) groupOf(dk []byte, r *Record) (group, error) {
	// Most digests are unique: one seek in the digest index settles them.
	k, _ := w.digestCur.Seek(dk)
	if k == nil || !bytes.HasPrefix(k, dk) {
		return group{size: r.Size}, nil
	}
	if v := w.grps.Get(dk); v != nil {
		return decodeGroup(v)
	}
	g := group{n: 1, inodes: 1, size: r.Size}
	if v := w.files.Get(k[len(dk):]); v != nil {
		m, err := codec.DecodeRecord(v)
		if err != nil {
			return g, err
		}
		g.size = m.Size
	}
	return g, nil
}

// sharesInode reports whether another path with r's (dev, ino) is in the
// digest group dk: a hardlink, which does not waste space.
func (w *wtx) sharesInode(dk, fk []byte, r *Record) bool {
	p := codec.InodeKey(nil, r.Dev, r.Ino)
	c := w.inodes.Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		other := k[len(p):]
		if bytes.Equal(other, fk) {
			continue
		}
		w.dbuf = append(append(w.dbuf[:0], dk...), other...)
		if got, _ := w.digestCur.Seek(w.dbuf); got != nil && bytes.Equal(got, w.dbuf) {
			return true
		}
	}
	return false
}

func (w *wtx) setGroup(dk []byte, old, g group) error {
	if old.inodes >= 2 {
		// A member came, went or changed: its survey is no longer true.
		if err := w.surveys.dropAt(codec.DescKey(old.duplicate(), dk)); err != nil {
			return err
		}
	}
	switch {
	case old.n == 0 && g.n > 0:
		w.c.Unique++
	case old.n > 0 && g.n == 0:
		w.c.Unique--
	}
	if old.inodes >= 2 {
		w.c.Groups--
		w.c.Duplicate -= old.duplicate()
		if g.inodes < 2 || g.duplicate() != old.duplicate() {
			if err := w.dups.Delete(codec.DescKey(old.duplicate(), dk)); err != nil {
				return err
			}
		}
	}
	if g.inodes >= 2 {
		w.c.Groups++
		w.c.Duplicate += g.duplicate()
		// The summary rides along so Dups needs no second lookup.
		if err := w.dups.Put(codec.DescKey(g.duplicate(), dk), g.encode()); err != nil {
			return err
		}
	}
	switch {
	case g.n >= 2:
		return w.grps.Put(bytes.Clone(dk), g.encode())
	case old.n >= 2:
		return w.grps.Delete(dk)
	}
	return nil
}

// subtreeDirs lists the directory keys at or below dir.
func (w *wtx) subtreeDirs(dir []byte) [][]byte {
	p := subtreePrefix(dir)
	var out [][]byte
	c := w.dirs.Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		out = append(out, bytes.Clone(k))
	}
	return out
}

// removeSubtree deletes dir (when it is a file) and every record below it.
func (w *wtx) removeSubtree(dir []byte, keep func(dev uint64) bool) (int, error) {
	n := 0
	if len(dir) > 1 {
		fk, r, ok, err := w.lookup(dir)
		if err != nil {
			return n, err
		}
		if ok && (keep == nil || !keep(r.Dev)) {
			if err := w.removeKey(fk, &r); err != nil {
				return n, err
			}
			n++
		}
	}
	for _, dk := range w.subtreeDirs(dir) {
		m, err := w.removeDir(dk, keep)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// removeDir deletes every record directly in the directory dk, but for
// those of the file systems keep (if not nil) reports true for.
func (w *wtx) removeDir(dk []byte, keep func(dev uint64) bool) (int, error) {
	id := w.dirID(dk)
	p := codec.IDKey(id)
	var keys [][]byte
	c := w.files.Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	n := 0
	for _, fk := range keys {
		r, err := codec.DecodeRecord(w.files.Get(fk))
		if err != nil {
			return n, fmt.Errorf("remove below %q: %w", dk, err)
		}
		if keep != nil && keep(r.Dev) {
			continue
		}
		if err := w.unindex(fk, &r); err != nil {
			return n, err
		}
		if err := w.files.Delete(fk); err != nil {
			return n, err
		}
		n++
	}
	if n < len(keys) {
		return n, nil // records kept: the directory stays
	}
	w.forgetDir(dk)
	if err := w.dirs.Delete(dk); err != nil {
		return 0, err
	}
	return len(keys), w.dirNames.Delete(p)
}

// mark sets the generation of the record at path, if there is one.
func (w *wtx) mark(path []byte, gen uint64) error {
	fk, r, ok, err := w.lookup(path)
	if !ok || err != nil {
		return err
	}
	if r.Generation == gen {
		return nil
	}
	r.Generation = gen
	return w.tails[0].put(fk, codec.AppendRecord(make([]byte, 0, codec.MaxRecordLen), &r))
}

// removeIfOlder deletes the record at path when its generation is below gen.
func (w *wtx) removeIfOlder(path []byte, gen uint64) (bool, error) {
	fk, r, ok, err := w.lookup(path)
	if !ok || err != nil || r.Generation >= gen {
		return false, err
	}
	return true, w.removeKey(fk, &r)
}

// nextGeneration increments and returns the scan generation counter.
func (w *wtx) nextGeneration() (uint64, error) {
	g, _ := binary.Uvarint(w.meta.Get(codec.MetaGeneration))
	g++
	return g, w.meta.Put(codec.MetaGeneration, binary.AppendUvarint(nil, g))
}

// has reports whether b holds key k. Index entries have empty values, and
// bbolt's Get returns nil for an empty value written in the same
// transaction, so presence is checked with a cursor.
func has(b *bolt.Bucket, k []byte) bool {
	got, _ := b.Cursor().Seek(k)
	return got != nil && bytes.Equal(got, k)
}

// appendFill is how full bbolt fills the pages of a bucket in a
// transaction that mostly appended to it. Its default, 0.5, suits inserts
// all over a bucket: the pages they split have room for the next ones. A
// bucket that grows at its end would keep every page half empty.
const appendFill = 1.0

// tail tells whether the keys put into a bucket in one transaction came
// mostly after the keys the bucket held before, as in a first scan: new
// directories get increasing ids, files often increasing inode numbers,
// and only the files of a directory met again after its subdirectories
// land before the end. The order within the transaction does not matter:
// bbolt splits the nodes it changed when it writes them at commit.
type tail struct {
	b            *bolt.Bucket
	last         []byte // the bucket's last key when the transaction began
	puts, before int    // keys put, and how many of them not after last
}

func newTail(b *bolt.Bucket) *tail {
	k, _ := b.Cursor().Last()
	return &tail{b: b, last: bytes.Clone(k)}
}

func (t *tail) put(k, v []byte) error {
	t.puts++
	if t.last != nil && bytes.Compare(k, t.last) <= 0 {
		t.before++
	}
	return t.b.Put(k, v)
}

// setFill fills the pages completely when at most one key in ten landed
// before the old end; bbolt reads FillPercent when it writes the
// transaction's pages. (With scattered keys, full pages would be split
// again by the next insert: measured 333 instead of 147 bytes of files
// pages per record for the shuffled corpus.)
func (t *tail) setFill() {
	if t.before*10 <= t.puts {
		t.b.FillPercent = appendFill
	}
}
