package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"syscall"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
	"github.com/annexd/annexd/store/internal/indexfile"
)

// The change log numbers every change of what a path holds, so another
// program can follow the index: it remembers the index id and the last
// sequence it has, and asks for the changes after it (Syncthing's index
// id and sequence). It is kept only when Options.Changes is set.
//
// What a path holds is its content as other hosts see it: the base
// backend, digest and size of an ok record, or nothing. A record that
// gains or loses its digest, or changes it, is logged; a re-verification,
// a new mtime, a mark or a move to another inode is not. A path that
// loses its content gets a tombstone. Several changes of one path in one
// transaction are logged once, with their net effect.
//
// The log lives in the bucket "changes", created when an index is first
// opened with Options.Changes. Its entries are removed once a consumer
// has them (TrimChanges). It is bounded: when it holds more entries than
// max(minLogCap, 2 × records), it is emptied, and a consumer resends the
// whole index, which is then cheaper than the log.
//
// # Older versions
//
// The bucket needs no schema change: an annexd that does not know it
// opens the index, leaves the bucket alone and writes records without
// logging them. Every transaction that logs also records bbolt's
// transaction id; when Open finds a later id, someone wrote unlogged
// changes, and the log gets a gap (ErrTrimmed for every consumer behind
// it), so nothing unlogged is taken as known. Migrations and compaction
// do the same, at the cost of one whole resend.

// Buckets and keys of the change log.
var (
	bucketChanges = []byte("changes") // index id, sequence, floor, marker; log
	bucketLog     = []byte("log")     // inside changes: seq (8 bytes big-endian) → entry
	changesID     = []byte("id")
	changesSeq    = []byte("seq")
	changesFloor  = []byte("floor")
	changesTxid   = []byte("txid")
)

// minLogCap is the fewest entries the log may hold before it is emptied.
// A variable for the tests.
var minLogCap uint64 = 1 << 16

// trimChunk bounds the entries one trimming transaction removes.
const trimChunk = 16384

// Errors of the change log.
var (
	// ErrTrimmed: the changes asked for are no longer kept. The consumer
	// must take the whole index (SnapshotChanges) and go on from there.
	ErrTrimmed = errors.New("store: changes trimmed, resend whole")
	// ErrNoChanges: the index was opened without Options.Changes.
	ErrNoChanges = errors.New("store: change log not kept")
)

// IndexID names one life of an index: a new file gets a new one, as does
// ResetChanges.
type IndexID [16]byte

// String returns the id in hex.
func (id IndexID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is unset.
func (id IndexID) IsZero() bool { return id == IndexID{} }

// ParseIndexID parses the hex form String returns.
func ParseIndexID(s string) (IndexID, error) {
	var id IndexID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("store: bad index id %q", s)
	}
	copy(id[:], b)
	return id, nil
}

// LogState is where the change log stands.
type LogState struct {
	IndexID IndexID
	Seq     uint64 // the last sequence number handed out
	Floor   uint64 // the first one kept: the changes after Floor-1 can be read
}

// Logged is one entry of the change log: what Path holds after change Seq.
type Logged struct {
	Seq     uint64
	Path    []byte
	Backend key.Backend // base backend; key.Unknown in a tombstone
	Digest  []byte
	Size    int64
}

// Tombstone reports whether the path holds no known content.
func (l *Logged) Tombstone() bool { return l.Backend == key.Unknown }

func appendLogged(b []byte, l *Logged) []byte {
	b = binary.AppendUvarint(b, uint64(len(l.Path)))
	b = append(b, l.Path...)
	b = append(b, byte(l.Backend))
	if l.Tombstone() {
		return b
	}
	b = append(b, l.Digest...)
	return binary.AppendUvarint(b, uint64(l.Size))
}

func decodeLogged(seq uint64, v []byte) (Logged, error) {
	l := Logged{Seq: seq}
	d := &codec.Decoder{B: v}
	n := d.Uvarint()
	if d.Err != nil || n > uint64(len(d.B)) || n == 0 || len(d.B) < int(n)+1 {
		return l, fmt.Errorf("%w: change %d: bad path", ErrCorrupt, seq)
	}
	l.Path, d.B = bytes.Clone(d.B[:n]), d.B[n:]
	l.Backend, d.B = key.Backend(d.B[0]), d.B[1:]
	if !l.Tombstone() {
		dl := l.Backend.DigestLen()
		if !l.Backend.Valid() || len(d.B) < dl {
			return l, fmt.Errorf("%w: change %d: bad digest", ErrCorrupt, seq)
		}
		l.Digest, d.B = bytes.Clone(d.B[:dl]), d.B[dl:]
		l.Size = int64(d.Uvarint())
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%w: change %d: trailing bytes", ErrCorrupt, seq)
	}
	return l, d.Err
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// getUint reads a uvarint value of b, 0 when absent.
func getUint(b *bolt.Bucket, k []byte) uint64 {
	v, _ := binary.Uvarint(b.Get(k))
	return v
}

func putUint(b *bolt.Bucket, k []byte, v uint64) error {
	return b.Put(k, binary.AppendUvarint(nil, v))
}

// readLogState reads the state of the change log bucket b.
func readLogState(b *bolt.Bucket) LogState {
	var st LogState
	copy(st.IndexID[:], b.Get(changesID))
	st.Seq, st.Floor = getUint(b, changesSeq), getUint(b, changesFloor)
	return st
}

// enableChanges makes sure the change log exists, and gives it a gap when
// someone committed without logging since the last logged transaction.
func enableChanges(db *bolt.DB) error {
	return db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketChanges)
		if b == nil {
			return createChanges(tx)
		}
		if getUint(b, changesTxid) != uint64(tx.ID()-1) {
			if err := gapChanges(b, false); err != nil {
				return err
			}
		}
		if err := keepFeedTxid(tx); err != nil {
			return err
		}
		return putUint(b, changesTxid, uint64(tx.ID()))
	})
}

// keepChangesTxid carries the log's last transaction id over a
// transaction that changes no record (the run marker's): such a
// transaction leaves no gap in the log.
func keepChangesTxid(tx *bolt.Tx) error {
	if err := keepFeedTxid(tx); err != nil {
		return err
	}
	b := tx.Bucket(bucketChanges)
	if b == nil || getUint(b, changesTxid) != uint64(tx.ID()-1) {
		return nil
	}
	return putUint(b, changesTxid, uint64(tx.ID()))
}

// createChanges makes the change log's bucket (createLog).
func createChanges(tx *bolt.Tx) error { return createLog(tx, bucketChanges) }

// createLog makes the bucket name of a log (the change log, the feed)
// with a new index id. An index that holds records already starts with
// a gap, so no consumer takes them as known.
func createLog(tx *bolt.Tx, name []byte) error {
	b, err := tx.CreateBucket(name)
	if err != nil {
		return err
	}
	if _, err := b.CreateBucket(bucketLog); err != nil {
		return err
	}
	var id IndexID
	_, _ = rand.Read(id[:])
	var seq uint64
	if k, _ := tx.Bucket(codec.BucketFiles).Cursor().First(); k != nil {
		seq = 1
	}
	for _, kv := range []struct {
		k []byte
		v uint64
	}{{changesSeq, seq}, {changesFloor, seq + 1}, {changesTxid, uint64(tx.ID())}} {
		if err := putUint(b, kv.k, kv.v); err != nil {
			return err
		}
	}
	return b.Put(changesID, id[:])
}

// gapChanges empties the log and skips one sequence number, so every
// consumer is behind the floor; newID also gives the index a new id.
func gapChanges(b *bolt.Bucket, newID bool) error {
	if err := b.DeleteBucket(bucketLog); err != nil && !errors.Is(err, bolterr.ErrBucketNotFound) {
		return err
	}
	if _, err := b.CreateBucket(bucketLog); err != nil {
		return err
	}
	if newID {
		var id IndexID
		_, _ = rand.Read(id[:])
		if err := b.Put(changesID, id[:]); err != nil {
			return err
		}
	}
	seq := getUint(b, changesSeq) + 1
	if err := putUint(b, changesSeq, seq); err != nil {
		return err
	}
	return putUint(b, changesFloor, seq+1)
}

// changeLog reads and trims the change log (kept with Options.Changes)
// for a hub; the writer appends to it in the transaction of each change
// (txLog).
type changeLog struct{ *reader }

// changesUpdate runs fn on the change log in its own write transaction and
// records the transaction as logged. Log housekeeping (trim, reset) takes
// this path rather than the writer's queue: it changes no record, and
// bbolt serialises it with the writer's transactions.
func (s *changeLog) changesUpdate(fn func(b *bolt.Bucket) error) error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	if !s.opts.Changes {
		return ErrNoChanges
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketChanges)
		if b == nil {
			return fmt.Errorf("%w: %s: bucket %q missing", ErrCorrupt, s.path, bucketChanges)
		}
		if err := fn(b); err != nil {
			return err
		}
		if err := keepFeedTxid(tx); err != nil {
			return err
		}
		return putUint(b, changesTxid, uint64(tx.ID()))
	})
	return s.writeErr(err)
}

// writeErr maps a failed housekeeping transaction's error as update does.
func (s *changeLog) writeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, bolterr.ErrMaxSizeReached):
		return fmt.Errorf("%w: %s: %v%s", ErrNoSpace, s.path, err, indexfile.Hint(err))
	case errors.Is(err, bolterr.ErrDatabaseNotOpen):
		return ErrClosed
	case errors.Is(err, ErrCorrupt), errors.Is(err, ErrNoChanges):
		return err
	}
	return fmt.Errorf("store: change log of %s: %w", s.path, err)
}

// ChangeLog returns where the change log stands.
func (s *changeLog) ChangeLog() (LogState, error) {
	var st LogState
	err := s.changesView(func(b *bolt.Bucket) error {
		st = readLogState(b)
		return nil
	})
	return st, err
}

func (s *changeLog) changesView(fn func(b *bolt.Bucket) error) error {
	if !s.opts.Changes {
		return ErrNoChanges
	}
	return s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketChanges)
		if b == nil {
			return ErrNoChanges
		}
		return fn(b)
	})
}

// ChangesAfter returns up to max changes after sequence after, in order,
// and the log's state. ErrTrimmed when some of them are no longer kept.
func (s *changeLog) ChangesAfter(after uint64, max int) ([]Logged, LogState, error) {
	var (
		out []Logged
		st  LogState
	)
	err := s.changesView(func(b *bolt.Bucket) error {
		st = readLogState(b)
		if after+1 < st.Floor || after > st.Seq {
			return fmt.Errorf("%w: after %d, the log holds %d to %d", ErrTrimmed, after, st.Floor, st.Seq)
		}
		c := b.Bucket(bucketLog).Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil && len(out) < max; k, v = c.Next() {
			l, err := decodeLogged(binary.BigEndian.Uint64(k), v)
			if err != nil {
				return err
			}
			out = append(out, l)
		}
		return nil
	})
	return out, st, err
}

// TrimChanges removes the entries up to seq: a consumer has them. Later
// requests for them get ErrTrimmed.
func (s *changeLog) TrimChanges(ctx context.Context, seq uint64) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		more := false
		err := s.changesUpdate(func(b *bolt.Bucket) error {
			st := readLogState(b)
			seq = min(seq, st.Seq)
			if seq < st.Floor {
				return nil
			}
			log := b.Bucket(bucketLog)
			var keys [][]byte
			c := log.Cursor()
			for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= seq; k, _ = c.Next() {
				if len(keys) == trimChunk {
					more = true
					break
				}
				keys = append(keys, bytes.Clone(k))
			}
			for _, k := range keys {
				if err := log.Delete(k); err != nil {
					return err
				}
			}
			floor := seq + 1
			if more {
				floor = binary.BigEndian.Uint64(keys[len(keys)-1]) + 1
			}
			return putUint(b, changesFloor, floor)
		})
		if err != nil || !more {
			return err
		}
	}
}

// ResetChanges gives the index a new id and empties the log: every
// consumer then resends it whole. For a consumer that holds more than the
// log ever had (an index restored from a backup).
func (s *changeLog) ResetChanges() error {
	return s.changesUpdate(func(b *bolt.Bucket) error { return gapChanges(b, true) })
}

// DropChanges removes the change log of an index opened without
// Options.Changes (a hub no longer configured).
func (s *changeLog) DropChanges() error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	if s.opts.Changes {
		return fmt.Errorf("store: %s: the change log is in use", s.path)
	}
	return s.writeErr(s.db.Update(func(tx *bolt.Tx) error {
		if err := keepFeedTxid(tx); err != nil {
			return err
		}
		if tx.Bucket(bucketChanges) == nil {
			return nil
		}
		return tx.DeleteBucket(bucketChanges)
	}))
}

// SnapshotChanges calls fn with what every path holds now (Seq is the
// state's), skipping paths that hold no known content, and returns the
// state read before the scan: the snapshot reflects every change up to
// its Seq, and maybe some later ones, which ChangesAfter(Seq) then
// repeats. fn runs outside any transaction.
func (s *changeLog) SnapshotChanges(ctx context.Context, fn func(l Logged) error) (LogState, error) {
	st, err := s.ChangeLog()
	if err != nil {
		return st, err
	}
	err = s.Subtree(ctx, []byte("/"), func(path []byte, r Record) error {
		if !r.Indexed() {
			return nil
		}
		return fn(Logged{Seq: st.Seq, Path: path, Backend: r.Backend.Base(), Digest: r.Digest, Size: r.Size})
	})
	return st, err
}

// txLog gathers one write transaction's changes of what paths hold and
// logs their net effect when it finishes.
type txLog struct {
	b, log *bolt.Bucket
	tx     *bolt.Tx
	notes  map[string]*note
	order  []string
	dirs   map[uint64][]byte // directory id → key, this transaction
}

// note is one path's content before the transaction and after it so far.
type note struct {
	before, after Logged
}

// openTxLog returns the change log of a writer transaction, nil when the
// log is not kept.
func (s *changeLog) openTxLog(tx *bolt.Tx) (*txLog, error) {
	if !s.opts.Changes {
		return nil, nil
	}
	b := tx.Bucket(bucketChanges)
	if b == nil {
		return nil, fmt.Errorf("%w: %s: bucket %q missing", ErrCorrupt, s.path, bucketChanges)
	}
	return &txLog{b: b, log: b.Bucket(bucketLog), tx: tx, notes: map[string]*note{}, dirs: map[uint64][]byte{}}, nil
}

// indexed notes that the record r at fk entered (in) or left the digest
// index. Records outside it hold no known content and are not noted.
func (w *wtx) logIndexed(fk []byte, r *Record, in bool) error {
	if w.log == nil || !r.Indexed() {
		return nil
	}
	id, base, ok := codec.SplitFileKey(fk)
	if !ok {
		return fmt.Errorf("%w: bad file key %x", ErrCorrupt, fk)
	}
	dk, err := w.log.dir(w, id)
	if err != nil {
		return err
	}
	path := joinPath(dk, base)
	held := Logged{Path: path, Backend: r.Backend.Base(), Digest: r.Digest, Size: r.Size}
	if in {
		w.log.set(Logged{Path: path}, held)
	} else {
		w.log.set(held, Logged{Path: path})
	}
	return nil
}

// dir returns the key of directory id as it is now in this transaction.
func (t *txLog) dir(w *wtx, id uint64) ([]byte, error) {
	if dk, ok := t.dirs[id]; ok {
		return dk, nil
	}
	dk := w.dirNames.Get(codec.IDKey(id))
	if dk == nil {
		return nil, fmt.Errorf("%w: directory %d of a record is missing", ErrCorrupt, id)
	}
	dk = bytes.Clone(dk)
	t.dirs[id] = dk
	return dk, nil
}

// set records that a path went from before to after. Only the first
// note of a path keeps its before.
func (t *txLog) set(before, after Logged) {
	n, ok := t.notes[string(after.Path)]
	if !ok {
		n = &note{before: before}
		t.notes[string(after.Path)] = n
		t.order = append(t.order, string(after.Path))
	}
	n.after = after
}

// logMovedDir notes that the records of directory id moved from the key
// oldDK to newDK: each one's old path loses its content, the new one gains it.
func (w *wtx) logMovedDir(idv, oldDK, newDK []byte) error {
	if w.log == nil {
		return nil
	}
	id, ok := codec.ParseIDKey(idv)
	if !ok {
		return fmt.Errorf("%w: bad directory id %x", ErrCorrupt, idv)
	}
	c := w.files.Cursor()
	for k, v := c.Seek(idv); k != nil && bytes.HasPrefix(k, idv); k, v = c.Next() {
		r, err := codec.DecodeRecord(v)
		if err != nil {
			return fmt.Errorf("rename %q: %w", oldDK, err)
		}
		if !r.Indexed() {
			continue
		}
		base := k[len(idv):]
		oldP, newP := joinPath(oldDK, base), joinPath(newDK, base)
		w.log.set(Logged{Path: oldP, Backend: r.Backend.Base(), Digest: r.Digest, Size: r.Size}, Logged{Path: oldP})
		w.log.set(Logged{Path: newP}, Logged{Path: newP, Backend: r.Backend.Base(), Digest: r.Digest, Size: r.Size})
	}
	w.log.dirs[id] = bytes.Clone(newDK)
	return nil
}

// flush appends the net changes to the log, empties it when it outgrew
// its bound, and records the transaction as logged.
func (t *txLog) flush(files int64) error {
	if t == nil {
		return nil
	}
	st := readLogState(t.b)
	for _, p := range t.order {
		n := t.notes[p]
		if sameContent(&n.before, &n.after) {
			continue
		}
		st.Seq++
		n.after.Seq = st.Seq
		if err := t.log.Put(seqKey(st.Seq), appendLogged(nil, &n.after)); err != nil {
			return err
		}
	}
	t.log.FillPercent = appendFill
	if err := putUint(t.b, changesSeq, st.Seq); err != nil {
		return err
	}
	if n := st.Seq + 1 - st.Floor; n > max(minLogCap, 2*uint64(max(files, 0))) {
		if err := t.b.DeleteBucket(bucketLog); err != nil {
			return err
		}
		if _, err := t.b.CreateBucket(bucketLog); err != nil {
			return err
		}
		if err := putUint(t.b, changesFloor, st.Seq+1); err != nil {
			return err
		}
	}
	return putUint(t.b, changesTxid, uint64(t.tx.ID()))
}

// sameContent reports whether a and b say the same of what a path holds.
func sameContent(a, b *Logged) bool {
	return a.Backend == b.Backend && bytes.Equal(a.Digest, b.Digest) && a.Size == b.Size
}

// checkChanges adds the change log's problems to rep: its state, and
// entries that do not decode or lie outside floor to seq.
func checkChanges(tx *bolt.Tx, rep *Report) {
	b := tx.Bucket(bucketChanges)
	if b == nil {
		return
	}
	st := readLogState(b)
	log := b.Bucket(bucketLog)
	switch {
	case len(b.Get(changesID)) != len(st.IndexID):
		rep.add("changes: index id of %d bytes", len(b.Get(changesID)))
	case st.Floor < 1 || st.Floor > st.Seq+1:
		rep.add("changes: floor %d outside 1 to %d", st.Floor, st.Seq+1)
	case log == nil:
		rep.add("changes: the log bucket is missing")
	}
	if log == nil {
		return
	}
	_ = log.ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			rep.add("changes: bad key %x", k)
			return nil
		}
		seq := binary.BigEndian.Uint64(k)
		if seq < st.Floor || seq > st.Seq {
			rep.add("changes: entry %d outside %d to %d", seq, st.Floor, st.Seq)
		}
		if _, err := decodeLogged(seq, v); err != nil {
			rep.add("changes: %v", err)
		}
		return nil
	})
}
