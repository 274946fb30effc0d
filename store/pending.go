package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"github.com/annexd/annexd/key"
)

// Deferred digest entries (schema 4).
//
// A digest is random, so every new record of a large group lands its
// digest-index entry on a random leaf: at 10^6 records each commit
// rewrote about as many pages as it had changes. A large group therefore
// appends its new digest entries to the pending bucket instead, in the
// same transaction as the records. The writer later merges them in key
// order, so neighbouring entries share the pages they dirty.
//
// A pending entry counts as digested but is in no group yet: Digested
// includes it, Unique, DupGroups and Wasted do not. ByDigest reads the
// pending bucket too, so whereis stays exact; Dups asks the writer to
// merge first. Adding entries commutes (a group's paths and distinct
// inodes do not depend on the order of additions), so a small group may
// index directly while entries are pending. A pending entry that must go
// away before its merge is dropped from the pending bucket.
//
// The merge runs in transactions of mergeTxEntries, in key order, and
// empties the pending bucket in the last one. A crash between them leaves
// entries both merged and pending; the next merge skips those already in
// the digest index.

// pendingBucket holds be64(seq) → pending entry (encodePending).
var bucketPending = []byte("pending")

const (
	// deferMinGroup is the smallest group whose new digest entries wait
	// for a merge. Smaller groups, the steady state of a watched tree,
	// index at once: they touch few pages either way.
	deferMinGroup = 512
	// mergeMin and mergeMax bound how many entries wait before a merge.
	// Between them, a quarter of the digest index: each merge rewrites
	// about every leaf once, so the cost per entry stays small.
	mergeMin, mergeMax = 16384, 131072
	// mergeTxEntries bounds one merge transaction, so the nodes it dirties
	// stay within the writer's usual memory: at 10^6 records, chunks of
	// 16,384 kept 120 MB live, chunks of 4,096 79 MB (the first scan alone
	// keeps about 60).
	mergeTxEntries = 4096
	// mergeIdle is how long the writer waits without changes before it
	// merges what is pending.
	mergeIdle = 100 * time.Millisecond
)

// pendingEntry is one deferred digest entry: the digest key, the file key
// and what the digest index, groupOf and sharesInode need of the record.
type pendingEntry struct {
	dk, fk         []byte
	backend        key.Backend
	size, dev, ino uint64
}

func encodePending(dk, fk []byte, r *Record) []byte {
	b := make([]byte, 0, 3*binary.MaxVarintLen64+len(dk)+len(fk)+2)
	b = binary.AppendUvarint(b, uint64(len(dk)))
	b = append(b, dk...)
	b = append(b, byte(r.Backend))
	b = binary.AppendUvarint(b, uint64(r.Size))
	b = binary.AppendUvarint(b, r.Dev)
	b = binary.AppendUvarint(b, r.Ino)
	return append(b, fk...)
}

func decodePending(v []byte) (pendingEntry, error) {
	d := &decoder{b: v}
	n := d.uvarint()
	if d.err != nil || n == 0 || n > uint64(len(d.b)) {
		return pendingEntry{}, fmt.Errorf("%w: pending entry %x", ErrCorrupt, v)
	}
	e := pendingEntry{dk: d.b[:n]}
	d.b = d.b[n:]
	if len(d.b) == 0 {
		return pendingEntry{}, fmt.Errorf("%w: pending entry %x", ErrCorrupt, v)
	}
	e.backend, d.b = key.Backend(d.b[0]), d.b[1:]
	e.size, e.dev, e.ino = d.uvarint(), d.uvarint(), d.uvarint()
	if d.err != nil || len(d.b) == 0 {
		return pendingEntry{}, fmt.Errorf("%w: pending entry %x", ErrCorrupt, v)
	}
	e.fk = d.b
	return e, nil
}

func (e *pendingEntry) record() Record {
	return Record{Backend: e.backend, Size: int64(e.size), Dev: e.dev, Ino: e.ino}
}

// deferDigest queues the digest entry dk ‖ fk for the next merge.
func (w *wtx) deferDigest(dk, fk []byte, r *Record) error {
	seq, err := w.pend.NextSequence()
	if err != nil {
		return err
	}
	w.pend.FillPercent = appendFill
	w.pendDelta++
	k := binary.BigEndian.AppendUint64(nil, seq)
	if w.pendIndex != nil {
		w.pendIndex[string(dk)+string(fk)] = k
	}
	return w.pend.Put(k, encodePending(dk, fk, r))
}

// dropPending removes the pending entry dk ‖ fk, reporting whether there
// was one. The first drop of a transaction reads the pending bucket once
// into an index by entry, so removing a whole tree before its merge costs
// one pass, not one per record.
func (w *wtx) dropPending(dk, fk []byte) (bool, error) {
	if w.pendCommitted+w.pendDelta <= 0 {
		return false, nil
	}
	if w.pendIndex == nil {
		w.pendIndex = make(map[string][]byte)
		err := w.pend.ForEach(func(k, v []byte) error {
			e, err := decodePending(v)
			w.pendIndex[string(e.dk)+string(e.fk)] = bytes.Clone(k)
			return err
		})
		if err != nil {
			w.pendIndex = nil
			return false, err
		}
	}
	id := string(dk) + string(fk)
	k, ok := w.pendIndex[id]
	if !ok {
		return false, nil
	}
	delete(w.pendIndex, id)
	w.pendDelta--
	return true, w.pend.Delete(k)
}

// addDigest puts dk ‖ fk into the digest index and updates its group.
func (w *wtx) addDigest(dk, fk []byte, r *Record) error {
	g, err := w.groupOf(dk, r)
	if err != nil {
		return err
	}
	old := g
	g.n++
	if g.n == 1 || !w.sharesInode(dk, fk, r) {
		g.inodes++
	}
	if err := w.setGroup(dk, old, g); err != nil {
		return err
	}
	w.dbuf = append(append(w.dbuf[:0], dk...), fk...)
	return w.digest.Put(w.dbuf, digestValue(r)) // bbolt copies keys, not values
}

// inDigest reports whether the digest index holds dk ‖ fk.
func (w *wtx) inDigest(dk, fk []byte) bool {
	w.dbuf = append(append(w.dbuf[:0], dk...), fk...)
	k, _ := w.digestCur.Seek(w.dbuf)
	return k != nil && bytes.Equal(k, w.dbuf)
}

// mergeHook runs between merge transactions; tests make it fail.
var mergeHook = func() error { return nil }

// mergeAt is how many pending entries start a merge.
func (s *Store) mergeAt(digested int64) int64 {
	if s.opts.mergeAt > 0 {
		return int64(s.opts.mergeAt)
	}
	return min(max(digested/4, mergeMin), mergeMax)
}

// readPending returns every pending entry in digest-index order, and
// whether some may already be merged (a merge was cut short).
func (s *Store) readPending() ([]pendingEntry, error) {
	var out []pendingEntry
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPending).ForEach(func(_, v []byte) error {
			e, err := decodePending(v)
			if err != nil {
				return err
			}
			e.dk, e.fk = bytes.Clone(e.dk), bytes.Clone(e.fk)
			out = append(out, e)
			return nil
		})
	})
	slices.SortFunc(out, func(a, b pendingEntry) int {
		return cmp.Or(bytes.Compare(a.dk, b.dk), bytes.Compare(a.fk, b.fk))
	})
	return out, err
}

// merge moves every pending entry into the digest index, in key order.
// Only the writer calls it (Run, Close, settle).
func (s *Store) merge() error {
	if s.pending.Load() <= 0 {
		return nil
	}
	start := time.Now()
	entries, err := s.readPending()
	if err != nil {
		return err
	}
	total, per := len(entries), cmp.Or(s.opts.mergeTx, mergeTxEntries)
	for err == nil && len(entries) > 0 {
		n := min(per, len(entries))
		last := n == len(entries)
		err = s.update(func(w *wtx) error { return w.mergeChunk(entries[:n], last) })
		if err == nil && !last {
			err = mergeHook()
		}
		entries = entries[n:]
	}
	if err != nil {
		s.mergeSkip = true // some chunks may have been committed
		return fmt.Errorf("store: merge the digest index: %w", err)
	}
	s.mergeSkip = false
	s.log.Debug("store: merged pending digest entries", "entries", total, "elapsed", time.Since(start))
	return nil
}

// mergeChunk adds entries to the digest index and, in the last chunk,
// empties the pending bucket.
func (w *wtx) mergeChunk(entries []pendingEntry, last bool) error {
	for i := range entries {
		e := &entries[i]
		if w.mergeSkip && w.inDigest(e.dk, e.fk) {
			continue // merged before a crash cut the merge short
		}
		r := e.record()
		if err := w.addDigest(e.dk, e.fk, &r); err != nil {
			return err
		}
	}
	if !last {
		return nil
	}
	if err := w.tx.DeleteBucket(bucketPending); err != nil && !errors.Is(err, bolterr.ErrBucketNotFound) {
		return err
	}
	b, err := w.tx.CreateBucket(bucketPending)
	w.pend = b
	w.pendDelta = -w.pendCommitted
	return err
}

// Settle merges the digest entries still pending, so that Stats' Unique,
// DupGroups and Wasted count every record. It returns at once when none
// are; Dups settles by itself.
func (s *Store) Settle(ctx context.Context) error { return s.settle(ctx) }

// settle merges what is pending before a read that needs every group.
// With the writer running it asks the writer; otherwise it merges itself.
// A read-only store cannot merge: ErrUngrouped.
func (s *Store) settle(ctx context.Context) error {
	for s.pending.Load() > 0 {
		select {
		case <-s.closing:
			return ErrClosed // Close merges, and nothing may write after it
		default:
		}
		if s.opts.ReadOnly {
			return fmt.Errorf("%w: %s: %d records not yet grouped (start annexd once to group them)",
				ErrUngrouped, s.path, s.pending.Load())
		}
		if s.writer.TryLock() {
			err := s.merge()
			s.writer.Unlock()
			return err
		}
		reply := make(chan error, 1)
		select {
		case s.settleReq <- reply:
			select {
			case err := <-reply:
				return err
			case <-s.closing:
				return ErrClosed
			case <-ctx.Done():
				return ctx.Err()
			}
		case <-s.closing:
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
			// Another settle holds the writer lock, or Run is starting.
		}
	}
	return nil
}

// Ungrouped returns how many records are indexed by digest but not yet in
// the duplicate counters (Stats' Unique, DupGroups and Wasted).
func (s *Store) Ungrouped() int64 { return max(s.pending.Load(), 0) }

// countPending sets the pending count from the index at open.
func (s *Store) countPending() error {
	return s.view(func(tx *bolt.Tx) error {
		n := tx.Bucket(bucketPending).Stats().KeyN
		s.pending.Store(int64(n))
		s.mergeSkip = n > 0
		// Damaged counters are Check's to report, not a reason to refuse
		// the open that check-db and repair need.
		c, _ := decodeCounters(tx.Bucket(bucketMeta).Get(metaCounters))
		s.digested.Store(c.Digested)
		return nil
	})
}

// pendingByDigest calls fn with the file key of every pending entry of
// digest key dk.
func pendingByDigest(tx *bolt.Tx, dk []byte, fn func(fk []byte) error) error {
	return tx.Bucket(bucketPending).ForEach(func(_, v []byte) error {
		e, err := decodePending(v)
		if err != nil || !bytes.Equal(e.dk, dk) {
			return err
		}
		return fn(e.fk)
	})
}
