package store

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store/codec"
)

// metaRun is the meta key of the run marker.
var metaRun = []byte("run")

// DefaultDataWindow is Options.DataWindow when it is not set.
const DefaultDataWindow = 2 * time.Minute

// maxSuspect bounds the suspect spans a marker carries; beyond it the two
// closest are merged into one that covers both.
const maxSuspect = 8

// Span is a closed interval [From, To] of Unix nanoseconds.
type Span struct{ From, To int64 }

// Contains reports whether ns is within s.
func (s Span) Contains(ns int64) bool { return s.From <= ns && ns <= s.To }

// Run is what the run marker says about one writer of the index: when it
// opened the index, when it last committed, and whether it closed it.
type Run struct {
	Started    time.Time
	LastCommit time.Time
	Clean      bool   // it closed the index: no change was left half done
	BootID     string // the kernel's boot id while it ran ("" unknown)
	// Window is how long before a commit a record's file may have held
	// data that was not on disk yet (Options.DataWindow).
	Window time.Duration
	// Suspect are the spans of HashedAt whose records it inherited as
	// suspect from the runs before it.
	Suspect []Span
}

const runMarkerV1 = 1

func (r *Run) encode() []byte {
	b := []byte{runMarkerV1, 0}
	if r.Clean {
		b[1] = 1
	}
	b = binary.AppendVarint(b, r.Started.UnixNano())
	b = binary.AppendVarint(b, r.LastCommit.UnixNano())
	b = binary.AppendVarint(b, int64(r.Window))
	b = binary.AppendUvarint(b, uint64(len(r.BootID)))
	b = append(b, r.BootID...)
	b = binary.AppendUvarint(b, uint64(len(r.Suspect)))
	for _, s := range r.Suspect {
		b = binary.AppendVarint(b, s.From)
		b = binary.AppendVarint(b, s.To)
	}
	return b
}

func decodeRun(b []byte) (Run, error) {
	var r Run
	if len(b) < 2 || b[0] != runMarkerV1 || b[1] > 1 {
		return r, fmt.Errorf("%w: run marker of %d bytes, version %v", ErrCorrupt, len(b), b[:min(len(b), 1)])
	}
	r.Clean = b[1] == 1
	d := &codec.Decoder{B: b[2:]}
	r.Started = time.Unix(0, d.Varint())
	r.LastCommit = time.Unix(0, d.Varint())
	r.Window = time.Duration(d.Varint())
	n := d.Uvarint()
	if d.Err == nil && n > uint64(len(d.B)) {
		d.Err = fmt.Errorf("%w: run marker boot id truncated", ErrCorrupt)
	}
	if d.Err == nil {
		r.BootID, d.B = string(d.B[:n]), d.B[n:]
	}
	n = d.Uvarint()
	for i := uint64(0); i < n && d.Err == nil; i++ {
		r.Suspect = append(r.Suspect, Span{From: d.Varint(), To: d.Varint()})
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%w: %d trailing bytes in run marker", ErrCorrupt, len(d.B))
	}
	return r, d.Err
}

// suspectAfter is what a run that follows prev inherits as suspect: prev's
// own suspect spans, and, when prev did not close the index or the machine
// was restarted since it did, the records prev committed within its
// window before its last commit. A power cut may have left their files
// with bytes other than the ones hashed, under the same stat identity.
func suspectAfter(prev Run, bootID string, kept bool) []Span {
	spans := slices.Clone(prev.Suspect)
	if cut, ok := cutShort(prev, bootID, kept); ok {
		spans = append(spans, cut)
	}
	return mergeSpans(spans)
}

// cutShort reports whether prev ended without its data surely on disk
// (the machine was restarted since, or it did not close the index and kept
// does not say the mounts it hashed on kept their writes: kept.go), and
// the span before its last commit whose work a power cut may have undone.
func cutShort(prev Run, bootID string, kept bool) (Span, bool) {
	if (prev.Clean || kept) && prev.BootID != "" && prev.BootID == bootID {
		return Span{}, false
	}
	last := prev.LastCommit.UnixNano()
	return Span{From: last - int64(prev.Window), To: last}, true
}

// mergeSpans sorts spans, joins those that overlap, and merges the two
// closest while there are more than maxSuspect.
func mergeSpans(spans []Span) []Span {
	slices.SortFunc(spans, func(a, b Span) int {
		switch {
		case a.From < b.From:
			return -1
		case a.From > b.From:
			return 1
		}
		return 0
	})
	var out []Span
	for _, s := range spans {
		if n := len(out); n > 0 && s.From <= out[n-1].To {
			out[n-1].To = max(out[n-1].To, s.To)
			continue
		}
		out = append(out, s)
	}
	for len(out) > maxSuspect {
		best := 0
		for i := 1; i+1 < len(out); i++ {
			if out[i+1].From-out[i].To < out[best+1].From-out[best].To {
				best = i
			}
		}
		out[best].To = out[best+1].To
		out = slices.Delete(out, best+1, best+2)
	}
	return out
}

// runMarker is the run marker of this run, written by the writer, and
// the last run's as Open found it, with the suspect spans derived from it.
type runMarker struct {
	*reader
	run     Run
	prev    Run
	hadPrev bool
	suspect []Span
	uses    mountUses // the mounts its records were hashed on (kept.go)
}

// beginRun, called by Open for a writer (not for check-db or Compact),
// reads the marker the last writer left, derives the spans of
// records that are suspect now, and writes this run's marker (not clean
// until Close). An index without a marker (new, or last written by a
// version that kept none) has nothing suspect. A marker that does not
// decode makes every record hashed before now suspect.
func (s *runMarker) beginRun() error {
	now := time.Now()
	cur := Run{Started: now, LastCommit: now, BootID: fsstat.BootID(), Window: s.opts.DataWindow}
	prev, had, uses, haveUses, err := s.lastRun(now)
	if err != nil {
		return err
	}
	sameBoot := had && prev.BootID != "" && prev.BootID == cur.BootID
	kept := sameBoot && !prev.Clean && haveUses && keptSince(prev, uses, keptMount)
	return s.db.Update(func(tx *bolt.Tx) error {
		m := tx.Bucket(codec.BucketMeta)
		if had {
			s.prev, s.hadPrev = prev, true
			cur.Suspect = suspectAfter(prev, cur.BootID, kept)
			s.suspect = cur.Suspect
			s.logEnd(prev, kept)
			if cut, ok := cutShort(prev, cur.BootID, kept); ok {
				n, err := dropSurveysIn(tx, cut)
				if err != nil {
					return err
				}
				if n > 0 {
					s.log.Info("store: dropped the block surveys made just before the last run ended; they are made again",
						"surveys", n)
				}
			}
		}
		s.run = cur
		s.uses.begin(tx, cur, uses, sameBoot && haveUses)
		if err := m.Put(metaRun, cur.encode()); err != nil {
			return err
		}
		if err := s.uses.stamp(m); err != nil {
			return err
		}
		return keepChangesTxid(tx)
	})
}

// lastRun reads the marker the last writer left, and its mounts list
// (haveUses false when it has none of its own). A marker that does not
// decode is read as a run that ended now, unclean, with a window back to
// 1970.
func (s *runMarker) lastRun(now time.Time) (prev Run, had bool, uses mountUses, haveUses bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(codec.BucketMeta)
		v := m.Get(metaRun)
		if v == nil {
			return nil
		}
		had = true
		if prev, err = decodeRun(v); err != nil {
			s.log.Warn("store: run marker unreadable; re-verifying every record", "err", err)
			prev = Run{LastCommit: now, Window: time.Duration(now.UnixNano())}
			return nil
		}
		uses, haveUses = prevUses(m, prev)
		return nil
	})
	return prev, had, uses, haveUses, err
}

// logEnd says how the last run ended, when it did not close the index.
func (s *runMarker) logEnd(prev Run, kept bool) {
	switch {
	case prev.Clean:
	case kept:
		s.log.Info("store: the last run did not close the index; the file systems it hashed on stayed mounted "+
			"and kept its writes, so its records stand", "last_commit", prev.LastCommit)
	default:
		s.log.Warn("store: the last run did not close the index; re-verifying the records it hashed last",
			"last_commit", prev.LastCommit, "window", prev.Window)
	}
}

// stampCommit records in a commit's transaction that the run committed now.
func (s *runMarker) stampCommit(tx *bolt.Tx) error {
	if s.run.Started.IsZero() {
		return nil
	}
	s.run.LastCommit = time.Now()
	m := tx.Bucket(codec.BucketMeta)
	if err := s.uses.stamp(m); err != nil {
		return err
	}
	return m.Put(metaRun, s.run.encode())
}

// endRun marks the run closed cleanly: every change it acknowledged is
// committed, and its writer stopped in order.
func (s *runMarker) endRun() error {
	if s.run.Started.IsZero() || s.dmg.get() != nil {
		return nil // a damaged index is not written (damage.go)
	}
	s.run.Clean = true
	return s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(codec.BucketMeta).Put(metaRun, s.run.encode()); err != nil {
			return err
		}
		return keepChangesTxid(tx)
	})
}

// PreviousRun returns what the marker said, when the index was opened,
// about the last writer before this one; false when there was no marker.
func (s *runMarker) PreviousRun() (Run, bool) { return s.prev, s.hadPrev }

// Suspect returns the spans of HashedAt of the records whose key may name
// bytes that never reached the disk: those hashed shortly before a run
// ended without closing the index (a crash, a power cut), or before a
// restart of the machine. Trusted applies them. They are fixed at Open.
func (s *runMarker) Suspect() []Span { return s.suspect }
