package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

// Survey is what a look at the blocks of one group's files found: which
// inodes share blocks, and how many bytes each holds alone. internal/dedup
// makes it with FIEMAP; the store keeps it until a record of the group
// changes (PutSurvey).
type Survey struct {
	At     int64         // when the survey was made, Unix ns
	Inodes []SurveyInode // one per inode of the group, by device and inode
}

// SurveyInode is what a survey found of one inode.
type SurveyInode struct {
	Dev, Ino uint64
	// Placed counts the bytes in blocks of the inode's own: holes and
	// data kept inline in metadata are not counted.
	Placed int64
	// Alone counts the placed bytes no other file shares. Making the
	// inode share another copy's blocks gives back this much.
	Alone int64
	// Copy is the index in Inodes of the first inode of its physical
	// copy: inodes that share blocks are one copy. Itself when it shares
	// with no other inode of the group.
	Copy int
	// Known is false when the file could not be surveyed (gone,
	// unreadable, replaced): Placed and Alone are then its size, and
	// Reclaimable leaves it out, as a run could not act on it either.
	Known bool
}

// Seen is the identity a survey found a file with. PutSurvey keeps a
// survey only while the records of the group agree with it.
type Seen struct {
	Size, MtimeNs, CtimeNs int64
}

// Shared reports whether inode i shares blocks with another of s.
func (s *Survey) Shared(i int) bool {
	c := s.Inodes[i].Copy
	for j := range s.Inodes {
		if j != i && s.Inodes[j].Copy == c {
			return true
		}
	}
	return false
}

// Find returns the index of (dev, ino) in s, or -1.
func (s *Survey) Find(dev, ino uint64) int {
	i, ok := slices.BinarySearchFunc(s.Inodes, [2]uint64{dev, ino}, func(in SurveyInode, k [2]uint64) int {
		if in.Dev != k[0] {
			return cmpU(in.Dev, k[0])
		}
		return cmpU(in.Ino, k[1])
	})
	if !ok {
		return -1
	}
	return i
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Reclaimable returns the bytes that making the kept inodes of each file
// system share the blocks of one of them would give back: on each device,
// what every kept inode holds alone, less what the keeper holds alone,
// the keeper being the one that holds least. Blocks already shared, holes
// and the names of one inode count nothing, and neither do inodes not
// Known. keep nil keeps all.
func (s *Survey) Reclaimable(keep func(i int) bool) int64 {
	var n, sum, least int64
	first := true // no kept inode of this device yet
	for i, in := range s.Inodes {
		if i > 0 && in.Dev != s.Inodes[i-1].Dev { // inodes come by device
			n += sum - least
			sum, least, first = 0, 0, true
		}
		if !in.Known || keep != nil && !keep(i) {
			continue
		}
		if first {
			least, first = in.Alone, false
		}
		sum += in.Alone
		least = min(least, in.Alone)
	}
	return n + sum - least
}

// Physical counts the physical copies among the kept inodes: inodes that
// share blocks count once. keep nil keeps all.
func (s *Survey) Physical(keep func(i int) bool) int {
	seen := make([]bool, len(s.Inodes)) // by Copy, an index of Inodes
	n := 0
	for i, in := range s.Inodes {
		if (keep == nil || keep(i)) && !seen[in.Copy] {
			seen[in.Copy] = true
			n++
		}
	}
	return n
}

// Unknown counts the kept inodes that could not be surveyed.
func (s *Survey) Unknown(keep func(i int) bool) int {
	n := 0
	for i, in := range s.Inodes {
		if !in.Known && (keep == nil || keep(i)) {
			n++
		}
	}
	return n
}

// check reports a survey that cannot be right: inodes out of order or
// repeated, copies pointing ahead, negative or impossible byte counts.
func (s *Survey) check() error {
	for i, in := range s.Inodes {
		if i > 0 {
			p := s.Inodes[i-1]
			if p.Dev > in.Dev || p.Dev == in.Dev && p.Ino >= in.Ino {
				return fmt.Errorf("%w: survey inodes out of order", ErrRecord)
			}
		}
		if in.Copy < 0 || in.Copy > i || s.Inodes[in.Copy].Dev != in.Dev || s.Inodes[in.Copy].Copy != in.Copy {
			return fmt.Errorf("%w: survey copy %d of inode %d", ErrRecord, in.Copy, i)
		}
		if in.Placed < 0 || in.Alone < 0 || in.Alone > in.Placed {
			return fmt.Errorf("%w: survey of inode %d: %d bytes alone of %d placed", ErrRecord, i, in.Alone, in.Placed)
		}
	}
	return nil
}

// surveyVersion is the first byte of a stored survey.
const surveyVersion = 1

// survey entries hold, after the version, the group's duplicate bytes
// and reclaimable bytes when it was put (what the counters added), the
// time, and each inode.
func encodeSurvey(s *Survey, dup, rec int64) []byte {
	b := []byte{surveyVersion}
	b = binary.AppendUvarint(b, uint64(dup))
	b = binary.AppendUvarint(b, uint64(rec))
	b = binary.AppendVarint(b, s.At)
	b = binary.AppendUvarint(b, uint64(len(s.Inodes)))
	for _, in := range s.Inodes {
		b = binary.AppendUvarint(b, in.Dev)
		b = binary.AppendUvarint(b, in.Ino)
		b = binary.AppendUvarint(b, uint64(in.Placed))
		b = binary.AppendUvarint(b, uint64(in.Alone))
		b = binary.AppendUvarint(b, uint64(in.Copy))
		known := byte(0)
		if in.Known {
			known = 1
		}
		b = append(b, known)
	}
	return b
}

// maxSurveyInodes bounds the room a stored count makes.
const maxSurveyInodes = 1 << 20

func decodeSurvey(b []byte) (s Survey, dup, rec int64, err error) {
	if len(b) == 0 || b[0] != surveyVersion {
		return s, 0, 0, fmt.Errorf("%w: survey of version %x", ErrCorrupt, b[:min(len(b), 1)])
	}
	d := &codec.Decoder{B: b[1:]}
	dup, rec = int64(d.Uvarint()), int64(d.Uvarint())
	s.At = d.Varint()
	n := d.Uvarint()
	if d.Err == nil && n > uint64(len(d.B)) {
		d.Err = fmt.Errorf("%w: survey of %d inodes in %d bytes", ErrCorrupt, n, len(d.B))
	}
	s.Inodes = make([]SurveyInode, 0, min(n, maxSurveyInodes))
	for i := uint64(0); i < n && d.Err == nil; i++ {
		in := SurveyInode{Dev: d.Uvarint(), Ino: d.Uvarint(), Placed: int64(d.Uvarint()), Alone: int64(d.Uvarint()),
			Copy: int(d.Uvarint())}
		if d.Err == nil && len(d.B) == 0 {
			d.Err = fmt.Errorf("%w: survey cut short", ErrCorrupt)
		}
		if d.Err == nil {
			in.Known = d.B[0] == 1
			d.B = d.B[1:]
		}
		s.Inodes = append(s.Inodes, in)
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%w: trailing bytes in survey", ErrCorrupt)
	}
	if d.Err == nil {
		if err := s.check(); err != nil {
			d.Err = fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
	}
	return s, dup, rec, d.Err
}

// surveyPut is what OpSurvey carries.
type surveyPut struct {
	dk     []byte // base backend ‖ digest
	survey Survey
	seen   []Seen // per inode
	drop   bool   // only drop the group's survey (DropSurvey)
	at     int64  // DropSurvey: when, Unix ns
}

// PutSurvey keeps s as the survey of the group of digest d (base backend
// b), and returns once it is durable. It is kept only while the group is
// what s saw: the same inodes, and every record of a Known inode with
// the identity seen[i] (the same index as s.Inodes) of its file.
// Otherwise the group's older survey is dropped and the error wraps
// ErrConflict. A survey made (s.At) before the one kept, or before the
// group's last DropSurvey, is refused with ErrConflict too, and the
// newer one stays: surveys made at once may arrive in any order. Any
// later change to a record of the group drops the survey.
func (s *Store) PutSurvey(ctx context.Context, b key.Backend, d []byte, sv Survey, seen []Seen) error {
	return s.wait(ctx, item{c: Change{Op: opSurvey}, survey: newSurveyPut(b, d, sv, seen)})
}

// SubmitSurvey is PutSurvey without waiting: done, when not nil, is
// called as Submit calls it.
func (s *Store) SubmitSurvey(b key.Backend, d []byte, sv Survey, seen []Seen, done func(error)) {
	s.submit(item{c: Change{Op: opSurvey}, survey: newSurveyPut(b, d, sv, seen), done: done})
}

// DropSurvey forgets the survey of the group of digest d (base backend
// b), if it has one, without waiting: for a caller that changed which of
// the group's files share blocks, which no record shows. A survey made
// before the call is refused from then on.
func (s *Store) DropSurvey(b key.Backend, d []byte) {
	p := &surveyPut{dk: append([]byte{byte(b.Base())}, d...), drop: true, at: time.Now().UnixNano()}
	s.submit(item{c: Change{Op: opSurvey}, survey: p})
}

func newSurveyPut(b key.Backend, d []byte, sv Survey, seen []Seen) *surveyPut {
	dk := append([]byte{byte(b.Base())}, d...)
	return &surveyPut{dk: dk, survey: sv, seen: seen}
}

// validate checks a survey before it is queued.
func (p *surveyPut) validate() error {
	if p == nil {
		return fmt.Errorf("%w: no survey", ErrRecord)
	}
	b := key.Backend(p.dk[0])
	if !b.Valid() || len(p.dk) != 1+b.DigestLen() {
		return fmt.Errorf("%w: survey of a digest of %d bytes", ErrRecord, len(p.dk)-1)
	}
	if p.drop {
		return nil
	}
	if len(p.seen) != len(p.survey.Inodes) || len(p.seen) < 2 {
		return fmt.Errorf("%w: survey of %d inodes, %d seen", ErrRecord, len(p.survey.Inodes), len(p.seen))
	}
	return p.survey.check()
}

// txSurveys is a write transaction's side of the surveys: it puts and
// drops them, with their counters, and keeps the floors.
type txSurveys struct {
	tx                  *bolt.Tx
	c                   *counters // the transaction's
	grps, files, digest *bolt.Bucket
	surv                *bolt.Bucket     // the surveys bucket, once used
	floors              map[string]int64 // the store's survey floors; nil in migrations
	uses                *mountUses       // the mounts of what was seen lately (kept.go); nil in migrations
}

// put is opSurvey: it stores the survey when the group agrees with
// it, replacing an older one. One that does not agree drops the older
// one too: the files have changed since.
func (t *txSurveys) put(p *surveyPut) error {
	if p.drop {
		t.raiseFloor(p.dk, p.at)
		return t.drop(p.dk)
	}
	g, err := t.group(p)
	if err != nil {
		if derr := t.drop(p.dk); derr != nil {
			return derr
		}
		return err
	}
	k := codec.DescKey(g.duplicate(), p.dk)
	if err := t.newer(p, k); err != nil {
		return err
	}
	if err := t.dropAt(k); err != nil {
		return err
	}
	if t.uses != nil {
		// A cut that ends a mount may take back the sharing it saw.
		for _, in := range p.survey.Inodes {
			t.uses.note(in.Dev, p.survey.At)
		}
	}
	rec := p.survey.Reclaimable(nil)
	t.c.Surveyed++
	t.c.SurveyedDup += g.duplicate()
	t.c.Reclaimable += rec
	return t.bucket().Put(k, encodeSurvey(&p.survey, g.duplicate(), rec))
}

// maxFloors bounds the survey floors kept; floorAge is how long one is
// kept once there are more: no survey takes that long.
const (
	maxFloors = 4096
	floorAge  = int64(time.Hour)
)

// raiseFloor refuses, from now on, surveys of group dk made before at.
func (t *txSurveys) raiseFloor(dk []byte, at int64) {
	if t.floors == nil {
		return
	}
	if len(t.floors) >= maxFloors {
		for k, when := range t.floors {
			if when < at-floorAge {
				delete(t.floors, k)
			}
		}
	}
	t.floors[string(dk)] = max(t.floors[string(dk)], at)
}

// newer returns ErrConflict for a survey made before the one kept under
// key k or before the group's floor.
func (t *txSurveys) newer(p *surveyPut, k []byte) error {
	floor := t.floors[string(p.dk)]
	if v := t.bucket().Get(k); v != nil {
		kept, _, _, err := decodeSurvey(v)
		if err != nil {
			return fmt.Errorf("survey %x: %w", k, err)
		}
		floor = max(floor, kept.At)
	}
	if p.survey.At < floor {
		return fmt.Errorf("%w: %x: a newer survey came first", ErrConflict, p.dk)
	}
	return nil
}

// group returns the group a survey is of, or ErrConflict when the
// group is not what the survey saw.
func (t *txSurveys) group(p *surveyPut) (group, error) {
	v := t.grps.Get(p.dk)
	if v == nil {
		return group{}, fmt.Errorf("%w: %x is no longer a group", ErrConflict, p.dk)
	}
	g, err := decodeGroup(v)
	if err != nil {
		return g, err
	}
	if g.inodes != int64(len(p.survey.Inodes)) {
		return g, fmt.Errorf("%w: %x has %d inodes, the survey %d", ErrConflict, p.dk, g.inodes, len(p.survey.Inodes))
	}
	return g, t.agrees(p)
}

// agrees checks every record of the group against what the survey
// saw of its inode.
func (t *txSurveys) agrees(p *surveyPut) error {
	c := t.digest.Cursor()
	for k, dv := c.Seek(p.dk); k != nil && bytes.HasPrefix(k, p.dk); k, dv = c.Next() {
		_, dev, ino, err := codec.DecodeDigestValue(dv)
		if err != nil {
			return err
		}
		i := p.survey.Find(dev, ino)
		if i < 0 {
			return fmt.Errorf("%w: %x: inode %d/%d not surveyed", ErrConflict, p.dk, dev, ino)
		}
		if !p.survey.Inodes[i].Known {
			continue // counted whole until its record changes
		}
		r, err := codec.DecodeRecord(t.files.Get(k[len(p.dk):]))
		if err != nil {
			return err
		}
		if s := p.seen[i]; r.Size != s.Size || r.MtimeNs != s.MtimeNs || r.CtimeNs != s.CtimeNs {
			return fmt.Errorf("%w: %x: inode %d/%d changed since its record", ErrConflict, p.dk, dev, ino)
		}
	}
	return nil
}

// drop removes the survey of group dk, if it has one, from the
// bucket and the counters.
func (t *txSurveys) drop(dk []byte) error {
	v := t.grps.Get(dk)
	if v == nil {
		return nil
	}
	g, err := decodeGroup(v)
	if err != nil || g.inodes < 2 {
		return err
	}
	return t.dropAt(codec.DescKey(g.duplicate(), dk))
}

// dropAt removes the survey under key k (the group's key in the
// dups bucket), if there is one.
func (t *txSurveys) dropAt(k []byte) error {
	b := t.bucket()
	if b == nil {
		return nil // a migration before schema 7
	}
	v := b.Get(k)
	if v == nil {
		return nil
	}
	_, dup, rec, err := decodeSurvey(v)
	if err != nil {
		return fmt.Errorf("survey %x: %w", k, err)
	}
	t.c.Surveyed--
	t.c.SurveyedDup -= dup
	t.c.Reclaimable -= rec
	return b.Delete(k)
}

// bucket returns the survey bucket, found once per transaction.
func (t *txSurveys) bucket() *bolt.Bucket {
	if t.surv == nil {
		t.surv = t.tx.Bucket(codec.BucketSurveys)
	}
	return t.surv
}

// surveyCursor reads the surveys of groups met in the dups bucket's
// order, which is theirs too: one step forward a group, not a search.
type surveyCursor struct {
	c    *bolt.Cursor // nil: no bucket (schema 6)
	k, v []byte
	on   bool // positioned
}

func newSurveyCursor(tx *bolt.Tx) *surveyCursor {
	sc := &surveyCursor{}
	if b := tx.Bucket(codec.BucketSurveys); b != nil {
		sc.c = b.Cursor()
	}
	return sc
}

// at returns the survey stored under the dups key k, or nil. Keys must
// come in increasing order.
func (sc *surveyCursor) at(k []byte) []byte {
	if sc.c == nil {
		return nil
	}
	if !sc.on {
		sc.k, sc.v = sc.c.Seek(k)
		sc.on = true
	}
	for sc.k != nil && bytes.Compare(sc.k, k) < 0 {
		sc.k, sc.v = sc.c.Next()
	}
	if sc.k != nil && bytes.Equal(sc.k, k) {
		return sc.v
	}
	return nil
}

// checkSurveys checks every stored survey against its group and recounts
// the survey counters.
func checkSurveys(tx *bolt.Tx, rep *Report, c *counters) {
	b := tx.Bucket(codec.BucketSurveys)
	if b == nil {
		return // schema 6 and older; Open requires it of schema 7
	}
	grps := tx.Bucket(codec.BucketGroups)
	_ = b.ForEach(func(k, v []byte) error {
		s, dup, rec, err := decodeSurvey(v)
		if err != nil || len(k) < 9 {
			rep.add("surveys: %x: %v", k, err)
			return nil
		}
		c.Surveyed++
		c.SurveyedDup += dup
		c.Reclaimable += rec
		dk := k[8:]
		g, err := decodeGroup(grps.Get(dk))
		switch {
		case err != nil || grps.Get(dk) == nil:
			rep.add("surveys: %x is not a group", k)
		case !bytes.Equal(k, codec.DescKey(g.duplicate(), dk)):
			rep.add("surveys: %x is not its group's key %x", k, codec.DescKey(g.duplicate(), dk))
		case g.inodes != int64(len(s.Inodes)) || g.duplicate() != dup:
			rep.add("surveys: %x: %d inodes, %d duplicate bytes; its group %d, %d", k, len(s.Inodes), dup, g.inodes, g.duplicate())
		case s.Reclaimable(nil) != rec:
			rep.add("surveys: %x: stored %d reclaimable bytes, its inodes %d", k, rec, s.Reclaimable(nil))
		}
		return nil
	})
}

// dropSurveysIn drops, in tx, the surveys made within span, with their
// counters, and returns how many. They may describe blocks a power cut
// took back: a reflink deduplication, or an unsharing write, that the
// file system's log had not committed, which no record shows. What is
// dropped is surveyed again.
func dropSurveysIn(tx *bolt.Tx, span Span) (int, error) {
	b := tx.Bucket(codec.BucketSurveys)
	if b == nil {
		return 0, nil
	}
	var keys [][]byte
	_ = b.ForEach(func(k, v []byte) error {
		if s, _, _, err := decodeSurvey(v); err == nil && span.Contains(s.At) {
			keys = append(keys, slices.Clone(k))
		}
		return nil // a survey that does not decode is Check's to report
	})
	if len(keys) == 0 {
		return 0, nil
	}
	meta := tx.Bucket(codec.BucketMeta)
	c, err := decodeCounters(meta.Get(codec.MetaCounters))
	if err != nil {
		return 0, err
	}
	t := txSurveys{tx: tx, c: &c}
	for _, k := range keys {
		if err := t.dropAt(k); err != nil {
			return 0, err
		}
	}
	return len(keys), meta.Put(codec.MetaCounters, c.encode())
}
