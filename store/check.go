package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

// Report is what Check found.
type Report struct {
	Path     string   `json:"path"`
	Problems []string `json:"problems"` // empty when the index is sound
	Omitted  int      `json:"omitted"`  // problems beyond the first maxProblems
	Files    int64    `json:"files"`
	Dirs     int64    `json:"dirs"`
	Digests  int64    `json:"digests"`
	Groups   int64    `json:"dup_groups"`
}

// OK reports whether no problem was found.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

const maxProblems = 100

func (r *Report) add(format string, args ...any) {
	if len(r.Problems) >= maxProblems {
		r.Omitted++
		return
	}
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

var errRollback = errors.New("rollback")

// Check runs bbolt's consistency check and this package's invariants on one
// snapshot: every record decodes and sits in a known directory; directory
// ids lie within the sequence that allocates them; the directory, digest
// and inode indexes hold exactly one entry per record
// that belongs in them, and the digest index the record's backend, device
// and inode (schema 5); group summaries, the duplicate order and the counters
// match a recount. It holds the write lock while it runs (a writable store
// cannot be checked safely otherwise), so it blocks writes for the duration:
// seconds per million records.
func (s *Store) Check() (Report, error) {
	rep := Report{Path: s.path}
	fn := func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			rep.add("bbolt: %v", err)
		}
		checkInvariantsSafely(tx, &rep)
		return errRollback
	}
	var err error
	if s.opts.ReadOnly {
		err = s.view(fn)
	} else {
		err = s.db.Update(fn)
	}
	if errors.Is(err, errRollback) {
		err = nil
	}
	return rep, err
}

// checkInvariantsSafely reports a damaged page met while walking the
// indexes as a problem rather than crashing.
func checkInvariantsSafely(tx *bolt.Tx, rep *Report) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			rep.add("damaged index, walk stopped: %v", r)
		}
	}()
	checkInvariants(tx, rep)
}

func checkInvariants(tx *bolt.Tx, rep *Report) {
	for _, b := range codec.Schema2Buckets {
		if tx.Bucket(b) == nil {
			rep.add("bucket %q missing", b)
			return
		}
	}
	var c counters
	pend := checkPending(tx, rep)
	pendIno := checkPendingInodes(tx, rep, pend)
	checkFiles(tx, rep, &c, pend, pendIno)
	checkDirs(tx, rep)
	checkCount(tx, rep, codec.BucketInodes, c.Files-onlyPending(pendIno), "inode index")
	checkGroups(tx, rep, &c, pend)
	checkSurveys(tx, rep, &c)
	checkVerified(tx, rep)
	c.Shelved = checkShelf(tx, rep)
	stored, err := decodeCounters(tx.Bucket(codec.BucketMeta).Get(codec.MetaCounters))
	if err != nil {
		rep.add("counters: %v", err)
	} else if stored != c {
		rep.add("counters %+v, recount %+v", stored, c)
	}
	checkChanges(tx, rep)
}

func checkFiles(tx *bolt.Tx, rep *Report, c *counters, pend, pendIno map[string]bool) {
	dirs, names := tx.Bucket(codec.BucketDirs), tx.Bucket(codec.BucketDirNames)
	inodes, digest := tx.Bucket(codec.BucketInodes), tx.Bucket(codec.BucketDigest)
	var kbuf []byte
	_ = tx.Bucket(codec.BucketFiles).ForEach(func(fk, v []byte) error {
		c.Files++
		id, base, ok := codec.SplitFileKey(fk)
		if !ok || len(base) == 0 || bytes.IndexByte(base, '/') >= 0 {
			rep.add("files: bad key %x", fk)
			return nil
		}
		idv := codec.IDKey(id)
		dk := names.Get(idv)
		if dk == nil || !bytes.Equal(dirs.Get(dk), idv) {
			rep.add("files: %x: directory %d unknown", fk, id)
			return nil
		}
		path := joinPath(dk, base)
		r, err := codec.DecodeRecord(v)
		if err == nil {
			err = r.Validate()
		}
		if err != nil {
			rep.add("files: %q: %v", path, err)
			return nil
		}
		c.Bytes += r.Size
		kbuf = append(codec.InodeKey(kbuf, r.Dev, r.Ino), fk...)
		if _, ok := pendIno[string(kbuf)]; !ok && !has(inodes, kbuf) {
			rep.add("inode index lacks %q (dev %d ino %d)", path, r.Dev, r.Ino)
		}
		if r.Indexed() {
			c.Digested++
			kbuf = append(digestKey(kbuf, &r), fk...)
			if _, ok := pend[string(kbuf)]; !ok && !has(digest, kbuf) {
				rep.add("digest index lacks %q", path)
			}
		}
		return nil
	})
	rep.Files = c.Files
}

func checkDirs(tx *bolt.Tx, rep *Report) {
	files, names, dirs := tx.Bucket(codec.BucketFiles).Cursor(), tx.Bucket(codec.BucketDirNames), tx.Bucket(codec.BucketDirs)
	seq := dirs.Sequence()
	_ = dirs.ForEach(func(dk, idv []byte) error {
		rep.Dirs++
		if len(dk) == 0 || dk[len(dk)-1] != '/' || (len(dk) > 1 && checkPath(dk[:len(dk)-1], false) != nil) {
			rep.add("dirs: bad directory key %q", dk)
		}
		// Ids come from the bucket's sequence and are never reused: an id
		// beyond it would be handed out again to a new directory.
		if id, ok := codec.ParseIDKey(idv); !ok || id == 0 || id > seq {
			rep.add("dirs: %q has id %x, outside the sequence (%d)", dk, idv, seq)
		}
		if !bytes.Equal(names.Get(idv), dk) {
			rep.add("dirs: %q ↔ id %x mismatch", dk, idv)
		}
		if k, _ := files.Seek(idv); k == nil || !bytes.HasPrefix(k, idv) {
			rep.add("dirs: %q holds no files", dk)
		}
		return nil
	})
	checkCount(tx, rep, codec.BucketDirNames, rep.Dirs, "directory names")
}

func checkCount(tx *bolt.Tx, rep *Report, bucket []byte, want int64, what string) {
	if n := int64(tx.Bucket(bucket).Stats().KeyN); n != want {
		rep.add("%s has %d entries, want %d", what, n, want)
	}
}

// checkGroups recounts every digest group from the digest index.
func checkGroups(tx *bolt.Tx, rep *Report, c *counters, pend map[string]bool) {
	files, grps, dups := tx.Bucket(codec.BucketFiles), tx.Bucket(codec.BucketGroups), tx.Bucket(codec.BucketDups)
	var (
		cur     []byte
		g       group
		inodes  = map[[2]uint64]bool{}
		entries int64
		nGrps   int64
	)
	flush := func() {
		if cur == nil {
			return
		}
		g.inodes = int64(len(inodes))
		c.Unique++
		if g.n >= 2 {
			nGrps++
			if v := grps.Get(cur); v == nil {
				rep.add("groups: %x missing", cur)
			} else if sg, err := decodeGroup(v); err != nil || sg != g {
				rep.add("groups: %x stored %+v, recount %+v (%v)", cur, sg, g, err)
			}
		}
		if g.inodes >= 2 {
			c.Groups++
			c.Duplicate += g.duplicate()
			if v := dups.Get(codec.DescKey(g.duplicate(), cur)); v == nil {
				rep.add("dups: %x (duplicate bytes %d) missing", cur, g.duplicate())
			} else if sg, err := decodeGroup(v); err != nil || sg != g {
				rep.add("dups: %x stored %+v, recount %+v (%v)", cur, sg, g, err)
			}
		}
	}
	schema, _ := binary.Uvarint(tx.Bucket(codec.BucketMeta).Get(codec.MetaSchema))
	_ = tx.Bucket(codec.BucketDigest).ForEach(func(k, v []byte) error {
		entries++
		b := key.Backend(k[0])
		n := 1 + b.DigestLen()
		if !b.Valid() || b.Base() != b || len(k) <= n {
			rep.add("bydigest: bad key %x", k)
			return nil
		}
		dk, fk := k[:n], k[n:]
		if !bytes.Equal(dk, cur) {
			flush()
			cur, g = bytes.Clone(dk), group{}
			clear(inodes)
		}
		r, err := codec.DecodeRecord(files.Get(fk))
		if err != nil || !r.Indexed() || !bytes.Equal(digestKey(nil, &r), dk) {
			rep.add("bydigest: %x points to a record without that digest", k)
			return nil
		}
		if schema >= 5 && !bytes.Equal(v, codec.DigestValue(&r)) {
			rep.add("bydigest: %x holds %x, its record says %x", k, v, codec.DigestValue(&r))
		}
		if g.n == 0 {
			g.size = r.Size
		} else if r.Size != g.size {
			rep.add("bydigest: %x: sizes %d and %d share a digest", dk, g.size, r.Size)
		}
		g.n++
		inodes[[2]uint64{r.Dev, r.Ino}] = true
		return nil
	})
	flush()
	for _, merged := range pend {
		if !merged {
			entries++
		}
	}
	if entries != c.Digested {
		rep.add("digest index has %d entries, want %d", entries, c.Digested)
	}
	checkCount(tx, rep, codec.BucketGroups, nGrps, "group summaries")
	checkCount(tx, rep, codec.BucketDups, c.Groups, "duplicate order")
	rep.Digests, rep.Groups = c.Unique, c.Groups
}

// checkPending checks the deferred digest entries (pending.go): each
// decodes, is there once and names a record with its digest. It returns
// them by digest-index key, true for those also merged (a merge cut short).
func checkPending(tx *bolt.Tx, rep *Report) map[string]bool {
	b := tx.Bucket(codec.BucketPending)
	if b == nil {
		return nil // schema 3 and older; Open requires it of schema 4
	}
	files, digest := tx.Bucket(codec.BucketFiles), tx.Bucket(codec.BucketDigest)
	out := map[string]bool{}
	_ = b.ForEach(func(k, v []byte) error {
		e, err := decodePending(v)
		if err != nil {
			rep.add("pending %x: %v", k, err)
			return nil
		}
		dk := string(e.dk) + string(e.fk)
		if len(k) <= codec.RunHeader || string(k[codec.RunHeader:]) != dk {
			rep.add("pending %x: key does not match its entry %x", k, dk)
			return nil
		}
		if _, dup := out[dk]; dup {
			rep.add("pending %x: entry %x listed twice", k, dk)
			return nil
		}
		r, err := codec.DecodeRecord(files.Get(e.fk))
		switch {
		case err != nil || !r.Indexed() || !bytes.Equal(digestKey(nil, &r), e.dk):
			rep.add("pending %x: %x names a record without that digest", k, dk)
		case r.Backend != e.backend || uint64(r.Size) != e.size || r.Dev != e.dev || r.Ino != e.ino:
			rep.add("pending %x: %x disagrees with its record (backend, size, dev or ino)", k, dk)
		}
		out[dk] = has(digest, []byte(dk))
		return nil
	})
	return out
}

// checkPendingInodes checks the deferred inode entries (pendinodes.go):
// each is listed once, names a record with that dev and ino, and belongs
// to a record whose digest entry is pending (pend, by digest-index key).
// It returns them without their run, true for those also in the inode
// index (a merge cut short).
func checkPendingInodes(tx *bolt.Tx, rep *Report, pend map[string]bool) map[string]bool {
	b := tx.Bucket(codec.BucketPendInodes)
	if b == nil {
		return nil // schema 5 and older; Open requires it of schema 6
	}
	files, inodes := tx.Bucket(codec.BucketFiles), tx.Bucket(codec.BucketInodes)
	out := map[string]bool{}
	_ = b.ForEach(func(k, _ []byte) error {
		if len(k) <= codec.RunHeader {
			rep.add("pending inode entry %x: too short", k)
			return nil
		}
		ik := k[codec.RunHeader:]
		if _, dup := out[string(ik)]; dup {
			rep.add("pending inode entry %x listed twice", ik)
			return nil
		}
		dev, n := codec.ReadID(ik)
		ino, m := codec.ReadID(ik[n:])
		if n == 0 || m == 0 {
			rep.add("pending inode entry %x: bad key", ik)
			return nil
		}
		fk := ik[n+m:]
		r, err := codec.DecodeRecord(files.Get(fk))
		switch {
		case err != nil || r.Dev != dev || r.Ino != ino:
			rep.add("pending inode entry %x names no record with that inode", ik)
		case !r.Indexed():
			rep.add("pending inode entry %x: its record has no digest", ik)
		default:
			if _, ok := pend[string(digestKey(nil, &r))+string(fk)]; !ok {
				rep.add("pending inode entry %x: its record's digest entry is not pending", ik)
			}
		}
		out[string(ik)] = has(inodes, ik)
		return nil
	})
	return out
}

// onlyPending counts the deferred inode entries not yet in the inode index.
func onlyPending(pendIno map[string]bool) int64 {
	var n int64
	for _, merged := range pendIno {
		if !merged {
			n++
		}
	}
	return n
}

// checkShelf checks that every shelved record decodes under a well-formed
// key, and returns how many there are.
func checkShelf(tx *bolt.Tx, rep *Report) int64 {
	b := tx.Bucket(codec.BucketShelf)
	if b == nil {
		return 0 // before schema 7; Open then requires it
	}
	var n int64
	_ = b.ForEach(func(k, v []byte) error {
		n++
		if len(k) <= 8 || checkPath(k[8:], false) != nil {
			rep.add("shelf key %q is not a file system and a path", k)
		} else if r, err := codec.DecodeRecord(v); err != nil {
			rep.add("shelved record of %q: %v", k[8:], err)
		} else if r.Dev != binary.BigEndian.Uint64(k) {
			rep.add("shelved record of %q is of file system %x, shelved under %x", k[8:], r.Dev, k[:8])
		}
		return nil
	})
	return n
}
