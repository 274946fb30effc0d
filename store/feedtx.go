package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/annexd/annexd/store/codec"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
)

// feedTx gathers one write transaction's record changes per path and
// logs their net effect to the feed when it finishes.
type feedTx struct {
	b     *bolt.Bucket
	tx    *bolt.Tx
	opts  FeedOptions
	notes map[string]*feedNote
	order []string
	dirs  map[uint64][]byte // directory id → key, this transaction
	// finding, while set, marks the records put as rot (Change.Finding).
	finding string
	logged  bool // entries were appended: ring the bell after the commit
}

// feedNote is one path's record before the transaction and after it so
// far; nil when there is none.
type feedNote struct {
	before, after *Record
	finding       string
}

// openFeedTx returns the feed of a writer transaction, nil when none is
// kept.
func (s *Store) openFeedTx(tx *bolt.Tx) (*feedTx, error) {
	if !s.feedEnabled() {
		return nil, nil
	}
	b := tx.Bucket(bucketFeed)
	if b == nil {
		return nil, fmt.Errorf("%w: %s: bucket %q missing", ErrCorrupt, s.path, bucketFeed)
	}
	return &feedTx{b: b, tx: tx, opts: s.opts.Feed, notes: map[string]*feedNote{}, dirs: map[uint64][]byte{}}, nil
}

// feedRecord notes that the record at fk came (in) or went.
func (w *wtx) feedRecord(fk []byte, r *Record, in bool) error {
	f := w.feed
	if f == nil {
		return nil
	}
	id, base, ok := codec.SplitFileKey(fk)
	if !ok {
		return fmt.Errorf("%w: bad file key %x", ErrCorrupt, fk)
	}
	dk, ok := f.dirs[id]
	if !ok {
		if dk = bytes.Clone(w.dirNames.Get(codec.IDKey(id))); dk == nil {
			return fmt.Errorf("%w: directory %d of a record is missing", ErrCorrupt, id)
		}
		f.dirs[id] = dk
	}
	c := *r
	c.Digest = bytes.Clone(r.Digest)
	if in {
		f.set(joinPath(dk, base), nil, &c)
	} else {
		f.set(joinPath(dk, base), &c, nil)
	}
	return nil
}

// set notes that path went from before to after; only a path's first
// note keeps its before.
func (f *feedTx) set(path []byte, before, after *Record) {
	n, ok := f.notes[string(path)]
	if !ok {
		n = &feedNote{before: before}
		f.notes[string(path)] = n
		f.order = append(f.order, string(path))
	}
	n.after = after
	if after != nil {
		n.finding = f.finding
	}
}

// feedMovedDir notes that the records of directory idv moved from the
// key oldDK to newDK.
func (w *wtx) feedMovedDir(idv, oldDK, newDK []byte) error {
	f := w.feed
	if f == nil {
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
		base := k[len(idv):]
		f.set(joinPath(oldDK, base), &r, nil)
		f.set(joinPath(newDK, base), nil, &r)
	}
	f.dirs[id] = bytes.Clone(newDK)
	return nil
}

// flush appends the transaction's entries, trims the feed and records the
// transaction as logged.
func (f *feedTx) flush() error {
	if f == nil {
		return nil
	}
	now := time.Now()
	st := readFeedState(f.b)
	log := f.b.Bucket(bucketLog)
	log.FillPercent = appendFill
	es := f.entries()
	for i := range es {
		st.Seq++
		es[i].Seq, es[i].Time = st.Seq, now.UnixNano()
		if err := log.Put(seqKey(st.Seq), appendFeed(nil, &es[i])); err != nil {
			return err
		}
	}
	f.logged = len(es) > 0
	if err := putUint(f.b, changesSeq, st.Seq); err != nil {
		return err
	}
	if err := trimFeed(f.b, f.opts, len(es)+feedTrimChunk, now); err != nil {
		return err
	}
	return putUint(f.b, changesTxid, uint64(f.tx.ID()))
}

// entries classifies the notes, in order, and pairs the moves.
func (f *feedTx) entries() []FeedEntry {
	var es []FeedEntry
	gone := map[moveKey]int{} // a deleted file → its entry
	for _, p := range f.order {
		n := f.notes[p]
		e, ok := classify(n.before, n.after, n.finding)
		if !ok {
			continue
		}
		e.Path = []byte(p)
		if e.Kind == FeedDelete && n.before.HasDigest() {
			gone[moveKeyOf(n.before)] = len(es)
		}
		es = append(es, e)
	}
	return pairMoves(es, gone, f.notes)
}

// moveKey is what a moved file keeps: its file and content.
type moveKey struct {
	dev, ino uint64
	backend  key.Backend
	digest   string
	size     int64
}

func moveKeyOf(r *Record) moveKey {
	return moveKey{r.Dev, r.Ino, r.Backend, string(r.Digest), r.Size}
}

// pairMoves turns an add (or an edit: a rename over another file) of
// the file and content a delete removed into one move, where the add was.
func pairMoves(es []FeedEntry, gone map[moveKey]int, notes map[string]*feedNote) []FeedEntry {
	if len(gone) == 0 {
		return es
	}
	drop := map[int]bool{}
	for i := range es {
		e := &es[i]
		if e.Kind != FeedAdd && e.Kind != FeedEdit {
			continue
		}
		j, ok := gone[moveKeyOf(notes[string(e.Path)].after)]
		if !ok || drop[j] {
			continue
		}
		drop[j] = true
		e.Kind, e.From, e.Old = FeedMove, es[j].Path, es[j].Old
	}
	out := es[:0]
	for i, e := range es {
		if !drop[i] {
			out = append(out, e)
		}
	}
	return out
}

// settled reports whether r says what its path holds: a key of the
// content, or one kept for bytes that went bad. A record waiting to be
// hashed is not news.
func settled(r *Record) bool {
	switch {
	case r.State == StateOK || r.State.Flagged():
		return r.HasDigest()
	}
	return r.State == StateUnreadable
}

func keyOf(r *Record) ContentKey {
	if r == nil || !r.HasDigest() {
		return ContentKey{}
	}
	return ContentKey{Backend: r.Backend, Digest: r.Digest, Size: r.Size}
}

// classify says what a path's going from before to after (nil: no
// record) is, and false when it is no news; finding is the Change's.
func classify(before, after *Record, finding string) (FeedEntry, bool) {
	old := keyOf(before)
	switch {
	case after == nil:
		return FeedEntry{Kind: FeedDelete, Old: old}, before != nil
	case !settled(after):
		return FeedEntry{}, false
	case after.State == StateOK:
		return classifyOK(before, after, finding)
	}
	kind := FeedUnreadable
	if after.State.Flagged() {
		kind = FeedRot
		finding = cmpOr(finding, after.State.String()) // "corrupt" or "untraced"
	}
	if before != nil && before.State == after.State && old.equal(keyOf(after)) {
		return FeedEntry{}, false // flagged already
	}
	return FeedEntry{Kind: kind, Old: keyOf(after), Finding: finding}, true
}

// classifyOK classifies a change to an ok record.
func classifyOK(before, after *Record, finding string) (FeedEntry, bool) {
	old, now := keyOf(before), keyOf(after)
	flagged := before != nil && (before.State.Flagged() || before.State == StateUnreadable)
	switch {
	case old.equal(now) && flagged:
		return FeedEntry{Kind: FeedHealed, Old: old, New: now}, true
	case old.equal(now):
		return FeedEntry{}, false
	case finding != "":
		return FeedEntry{Kind: FeedRot, Old: old, New: now, Finding: finding}, true
	case old.IsZero():
		return FeedEntry{Kind: FeedAdd, New: now}, true
	}
	return FeedEntry{Kind: FeedEdit, Old: old, New: now}, true
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// feedVersion is the first byte of an encoded entry.
const feedVersion = 1

func appendFeed(b []byte, e *FeedEntry) []byte {
	b = append(b, feedVersion, byte(e.Kind))
	b = binary.AppendVarint(b, e.Time)
	b = appendBytes(b, e.Path)
	b = appendBytes(b, e.From)
	b = appendContentKey(b, e.Old)
	b = appendContentKey(b, e.New)
	return appendBytes(b, []byte(e.Finding))
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendContentKey(b []byte, k ContentKey) []byte {
	b = append(b, byte(k.Backend))
	if k.IsZero() {
		return b
	}
	b = append(b, k.Digest...)
	return binary.AppendUvarint(b, uint64(k.Size))
}

// feedTime returns the time of an encoded entry, 0 when it has none.
func feedTime(v []byte) int64 {
	if len(v) < 3 {
		return 0
	}
	t, _ := binary.Varint(v[2:])
	return t
}

func decodeFeed(seq uint64, v []byte) (FeedEntry, error) {
	e := FeedEntry{Seq: seq}
	if len(v) < 2 || v[0] != feedVersion || FeedKind(v[1]) >= feedKindEnd || v[1] == 0 {
		return e, fmt.Errorf("%w: feed entry %d: bad header", ErrCorrupt, seq)
	}
	e.Kind = FeedKind(v[1])
	d := &feedDecoder{codec.Decoder{B: v[2:]}}
	e.Time = d.Varint()
	e.Path, e.From = d.bytes(), d.bytes()
	e.Old, e.New = d.contentKey(), d.contentKey()
	e.Finding = string(d.bytes())
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%w: feed entry %d: trailing bytes", ErrCorrupt, seq)
	}
	if d.Err != nil {
		return e, fmt.Errorf("%w: feed entry %d: %v", ErrCorrupt, seq, d.Err)
	}
	return e, nil
}

// feedDecoder reads a feed entry's fields.
type feedDecoder struct{ codec.Decoder }

// bytes reads a length-prefixed byte string.
func (d *feedDecoder) bytes() []byte {
	n := d.Uvarint()
	if d.Err != nil {
		return nil
	}
	if n > uint64(len(d.B)) {
		d.Err = fmt.Errorf("%w: short bytes", ErrCorrupt)
		return nil
	}
	if n == 0 {
		return nil
	}
	v := bytes.Clone(d.B[:n])
	d.B = d.B[n:]
	return v
}

func (d *feedDecoder) contentKey() ContentKey {
	if d.Err != nil || len(d.B) == 0 {
		d.Err = cmpErr(d.Err, fmt.Errorf("%w: short key", ErrCorrupt))
		return ContentKey{}
	}
	k := ContentKey{Backend: key.Backend(d.B[0])}
	d.B = d.B[1:]
	if k.IsZero() {
		return k
	}
	if !k.Backend.Valid() || len(d.B) < k.Backend.DigestLen() {
		d.Err = fmt.Errorf("%w: bad key", ErrCorrupt)
		return ContentKey{}
	}
	k.Digest, d.B = bytes.Clone(d.B[:k.Backend.DigestLen()]), d.B[k.Backend.DigestLen():]
	k.Size = int64(d.Uvarint())
	return k
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
