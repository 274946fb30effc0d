package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

// Deferred digest entries (schema 4; sorted runs since schema 6).
//
// A digest is random, so every new record of a large group lands its
// digest-index entry on a random leaf: at 10^6 records each commit
// rewrote about as many pages as it had changes. A large group therefore
// defers its new digest entries: the transaction writes them, in key
// order, as one run at the end of the pending bucket, be64(run) ‖ digest
// key ‖ file key → entry, so they append. The writer later merges every
// run into the digest index in key order, so neighbouring entries share
// the pages they dirty; the merge reads the runs side by side and holds
// one position per run, not the entries.
//
// A pending entry counts as digested but is in no group yet: Digested
// includes it, Unique, DupGroups and Duplicate do not. ByDigest reads the
// pending runs too (a seek in each), so whereis stays exact; Dups asks the
// writer to merge first. Adding entries commutes (a group's paths and
// distinct inodes do not depend on the order of additions), so a small
// group may index directly while entries are pending. A pending entry that
// must go away before its merge is dropped from its run.
//
// A merge starts once the pending entries are as many as those merged
// (from mergeMin on), so each merge rewrites the digest index's leaves
// about once for as many new entries as it holds, or once maxRuns runs
// wait, which bounds a lookup's seeks; also when the writer has had no
// change for mergeIdle, or when asked (SettleSoon: the indexer asks once
// a scan's last changes are on their way). It runs in transactions of
// mergeTxEntries and empties the pending bucket in the last one. A crash
// between them leaves entries both merged and pending; the next merge
// skips those already in the digest index.

const (
	// deferMinGroup is the smallest group whose new digest entries wait
	// for a merge. Smaller groups, the steady state of a watched tree,
	// index at once: they touch few pages either way.
	deferMinGroup = 512
	// mergeMin is the fewest pending entries that start a merge before
	// the writer is idle.
	mergeMin = 16384
	// maxRuns is the most runs that wait before a merge.
	maxRuns = 512
	// mergeTxEntries bounds one merge transaction, so the nodes it dirties
	// stay within the writer's usual memory. Each transaction ends with a
	// sync, which is what a merge waits for: at 10^6 records, a first scan
	// with chunks of 16,384 ended 0.5-0.8 s sooner than with 4,096 in three
	// alternated pairs (of 17-20 s), with a peak RssAnon of 93 MiB. (Before
	// schema 6 a merge also held its entries, and 16,384 kept 120 MB live.)
	mergeTxEntries = 16384
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
	d := &codec.Decoder{B: v}
	n := d.Uvarint()
	if d.Err != nil || n == 0 || n > uint64(len(d.B)) {
		return pendingEntry{}, fmt.Errorf("%w: pending entry %x", ErrCorrupt, v)
	}
	e := pendingEntry{dk: d.B[:n]}
	d.B = d.B[n:]
	if len(d.B) == 0 {
		return pendingEntry{}, fmt.Errorf("%w: pending entry %x", ErrCorrupt, v)
	}
	e.backend, d.B = key.Backend(d.B[0]), d.B[1:]
	e.size, e.dev, e.ino = d.Uvarint(), d.Uvarint(), d.Uvarint()
	if d.Err != nil || len(d.B) == 0 {
		return pendingEntry{}, fmt.Errorf("%w: pending entry %x", ErrCorrupt, v)
	}
	e.fk = d.B
	return e, nil
}

func (e *pendingEntry) record() Record {
	return Record{Backend: e.backend, Size: int64(e.size), Dev: e.dev, Ino: e.ino}
}

// txRuns is one write transaction's side of the deferred runs: the
// pending buckets, the runs of digest and inode entries it adds (written
// in key order when it ends) and its drops from committed runs.
type txRuns struct {
	pend             *bolt.Bucket
	committed, delta int64    // entries pending when it began; those it added less those it dropped
	dig              *keyBuf  // its run of digest entries: entry → value
	digDrops         runDrops // drops from committed runs
	deferring        bool     // the group's new digest and inode entries wait for a merge
	mergeSkip        bool     // entries may be both pending and merged (a cut-short merge)
	rbuf             []byte

	// The deferred inode entries (pendinodes.go).
	pendIno  *bolt.Bucket
	ino      *keyBuf // entry → nil
	inoDrops runDrops
	filter   *runFilter // takes the prefix of each deferred inode entry (runfilter.go); may be nil
}

// any reports whether digest entries may be pending.
func (t *txRuns) any() bool { return t.committed+t.delta > 0 }

// deferDigest adds the digest entry dk ‖ fk to this transaction's run.
func (t *txRuns) deferDigest(dk, fk []byte, r *Record) {
	t.delta++
	t.rbuf = append(append(t.rbuf[:0], dk...), fk...)
	t.dig.add(t.rbuf, encodePending(dk, fk, r))
}

// flush writes this transaction's deferred digest and inode entries as
// one run each.
func (t *txRuns) flush() error {
	if err := writeRun(t.pend, t.dig); err != nil {
		return err
	}
	return writeRun(t.pendIno, t.ino)
}

// dropDigest removes the pending entry dk ‖ fk, reporting whether there
// was one: from this transaction's run, or from a committed one
// (runDrops).
func (t *txRuns) dropDigest(dk, fk []byte) (bool, error) {
	if !t.any() {
		return false, nil
	}
	e := append(bytes.Clone(dk), fk...)
	if t.dig.remove(e) {
		t.delta--
		return true, nil
	}
	k, err := t.digDrops.find(t.pend, e)
	if k == nil || err != nil {
		return false, err
	}
	t.delta--
	return true, t.pend.Delete(k)
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
	return w.digest.Put(w.dbuf, codec.DigestValue(r)) // bbolt copies keys, not values
}

// inDigest reports whether the digest index holds dk ‖ fk.
func (w *wtx) inDigest(dk, fk []byte) bool {
	w.dbuf = append(append(w.dbuf[:0], dk...), fk...)
	k, _ := w.digestCur.Seek(w.dbuf)
	return k != nil && bytes.Equal(k, w.dbuf)
}

// deferred is the writer's deferred-run layer as the store sees it: how
// many entries wait in how many runs, when they are due for a merge, and
// the merge itself, in write transactions of the store's (update). Anyone
// reads the counts; the rest is the writer's: Run, Close, and a settle
// that holds the writer lock.
type deferred struct {
	update func(fn func(w *wtx) error) error
	view   func(fn func(tx *bolt.Tx) error) error
	log    *slog.Logger
	opts   *Options // mergeAt and mergeTx, for tests

	pending   atomic.Int64              // entries committed to the pending bucket
	digested  atomic.Int64              // the digest entries they are measured against
	runs      atomic.Int64              // runs written since the bucket was last emptied
	inoFilter atomic.Pointer[runFilter] // the inodes pendinodes may name (runfilter.go); nil: seek in the runs
	settleReq chan chan error           // settle's requests to a running writer
	soon      chan struct{}             // SettleSoon's requests

	deferring  bool      // the writer's current group defers its digest entries
	mergeSkip  bool      // a merge was cut short: skip entries already merged
	mergeFails int       // merges failed in a row
	mergeAfter time.Time // no merge of the writer's own before then
}

func newDeferred(s *Store) *deferred {
	return &deferred{update: s.update, view: s.view, log: s.log, opts: &s.opts,
		settleReq: make(chan chan error), soon: make(chan struct{}, 1)}
}

// mergeHook runs between merge transactions; tests make it fail.
var mergeHook = func() error { return nil }

// mergeDue reports whether pending entries in runs runs, of digested
// digest entries in all, call for a merge.
func (d *deferred) mergeDue(pending, digested, runs int64) bool {
	if d.opts.mergeAt > 0 {
		return pending >= int64(d.opts.mergeAt)
	}
	return pending >= max(digested-pending, mergeMin) || runs >= maxRuns
}

// due reports whether the pending entries call for a merge now.
func (d *deferred) due() bool {
	return d.mergeDue(d.pending.Load(), d.digested.Load(), d.runs.Load()) && time.Now().After(d.mergeAfter)
}

// merge moves every deferred inode entry into the inode index
// (pendinodes.go), then every pending entry into the digest index, each
// in key order. Only the writer calls it (Run, Close, settle).
func (d *deferred) merge() error {
	if d.pending.Load() <= 0 {
		return nil
	}
	start := time.Now()
	per := cmp.Or(d.opts.mergeTx, mergeTxEntries)
	if err := d.mergeRuns(codec.BucketPendInodes, per, mergeInode); err != nil {
		d.mergeSkip = true // some chunks may have been committed
		return fmt.Errorf("store: merge the inode index: %w", err)
	}
	total := d.pending.Load()
	if err := d.mergeRuns(codec.BucketPending, per, mergeDigest); err != nil {
		d.mergeSkip = true
		return fmt.Errorf("store: merge the digest index: %w", err)
	}
	d.mergeSkip = false
	if err := d.renewInodeFilter(); err != nil {
		// The old filter stays and takes the new runs' entries too: lookups
		// stay right, only less often skipped.
		d.log.Warn("store: cannot renew the inode filter", "err", err)
	}
	d.log.Debug("store: merged pending digest entries", "entries", total, "elapsed", time.Since(start))
	return nil
}

// mergeInode puts one deferred inode entry, run removed, into the inode
// index; a put of an entry already there (a merge cut short) changes
// nothing.
func mergeInode(w *wtx, ik, _ []byte) error { return w.inodes.Put(ik, nil) }

// mergeDigest adds one pending entry to the digest index and its group.
func mergeDigest(w *wtx, _, v []byte) error {
	e, err := decodePending(v)
	if err != nil {
		return err
	}
	if w.runs.mergeSkip && w.inDigest(e.dk, e.fk) {
		return nil // merged before a crash cut the merge short
	}
	r := e.record()
	return w.addDigest(e.dk, e.fk, &r)
}

// mergeRuns applies fn, in key order without the run prefix, to every
// entry of the run bucket name, per entries a transaction. The digest
// merge's last transaction empties both pending buckets.
func (d *deferred) mergeRuns(name []byte, per int, fn func(w *wtx, k, v []byte) error) error {
	var m *runMerge
	err := d.view(func(tx *bolt.Tx) error {
		var err error
		m, err = newRunMerge(tx.Bucket(name))
		return err
	})
	for err == nil {
		var done bool
		err = d.update(func(w *wtx) error {
			var err error
			done, err = m.step(w.tx.Bucket(name), per, func(k, v []byte) error { w.tick(); return fn(w, k, v) })
			if err == nil && done && bytes.Equal(name, codec.BucketPending) {
				err = w.runs.empty(w.tx)
			}
			return err
		})
		if err != nil || done {
			return err
		}
		err = mergeHook()
	}
	return err
}

// empty replaces both pending buckets with empty ones.
func (t *txRuns) empty(tx *bolt.Tx) error {
	for _, name := range [][]byte{codec.BucketPending, codec.BucketPendInodes} {
		if err := tx.DeleteBucket(name); err != nil && !errors.Is(err, bolterr.ErrBucketNotFound) {
			return err
		}
	}
	b, err := tx.CreateBucket(codec.BucketPending)
	if err != nil {
		return err
	}
	t.pend = b
	t.delta = -t.committed
	var seq uint64
	if t.pendIno != nil {
		seq = t.pendIno.Sequence()
	}
	if t.pendIno, err = tx.CreateBucket(codec.BucketPendInodes); err != nil {
		return err
	}
	return t.pendIno.SetSequence(seq) // run numbers only grow (runfilter.go)
}

// Settle merges the digest entries still pending, so that Stats' Unique,
// DupGroups and Duplicate count every record. It returns at once when none
// are; Dups settles by itself.
func (s *Store) Settle(ctx context.Context) error { return s.settle(ctx) }

// settle merges what is pending before a read that needs every group.
// With the writer running it asks the writer; otherwise it merges itself.
// A read-only store cannot merge: ErrUngrouped.
func (s *Store) settle(ctx context.Context) error {
	for s.deferred.pending.Load() > 0 {
		select {
		case <-s.closing:
			return ErrClosed // Close merges, and nothing may write after it
		default:
		}
		if s.opts.ReadOnly {
			return fmt.Errorf("%w: %s: %d records not yet grouped (start annexd once to group them)",
				ErrUngrouped, s.path, s.deferred.pending.Load())
		}
		if s.writer.TryLock() {
			err := s.deferred.merge()
			s.writer.Unlock()
			return err
		}
		reply := make(chan error, 1)
		select {
		case s.deferred.settleReq <- reply:
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

// DeferredGroup is the fewest changes in a group that defers its new
// digest entries to a merge: once fewer changes than this are still to
// come, none of them will add a pending entry.
const DeferredGroup = deferMinGroup

// SettleSoon asks the writer to merge what is pending once it is between
// groups, and returns at once. The indexer calls it when no walk runs and
// fewer than DeferredGroup changes are on their way: the last merge of a
// scan then runs while its last files are hashed (large files, which
// finish last), not after the scan. Without it that merge waits until the
// writer has had no change for mergeIdle, which a trickle of large files
// postpones to the end.
func (s *Store) SettleSoon() {
	select {
	case s.deferred.soon <- struct{}{}:
	default: // asked already
	}
}

// Ungrouped returns how many records are indexed by digest but not yet in
// the duplicate counters (Stats' Unique, DupGroups and Duplicate).
func (s *reader) Ungrouped() int64 { return max(s.deferred.pending.Load(), 0) }

// countPending sets the counts from the index at open.
func (s *Store) countPending() error {
	return s.view(func(tx *bolt.Tx) error {
		// Damaged counters are Check's to report, not a reason to refuse
		// the open that check-db and repair need.
		c, _ := decodeCounters(tx.Bucket(codec.BucketMeta).Get(codec.MetaCounters))
		s.shelved.Store(c.Shelved)
		s.deferred.load(tx, c.Digested)
		return nil
	})
}

// load sets the counts from the index at open; digested is the counter.
func (d *deferred) load(tx *bolt.Tx, digested int64) {
	b := tx.Bucket(codec.BucketPending)
	n := b.Stats().KeyN
	d.pending.Store(int64(n))
	d.runs.Store(int64(b.Sequence()))
	d.mergeSkip = n > 0
	d.digested.Store(digested)
	if !d.opts.ReadOnly {
		if b := tx.Bucket(codec.BucketPendInodes); b != nil {
			d.inoFilter.Store(openInodeFilter(b))
		}
	}
}

// begin hands a write transaction the layer's state.
func (d *deferred) begin(w *wtx) {
	w.runs.pend, w.runs.committed = w.tx.Bucket(codec.BucketPending), d.pending.Load()
	w.runs.deferring, w.runs.mergeSkip = d.deferring, d.mergeSkip
	w.runs.filter = d.inoFilter.Load()
}

// committed takes the counts of a transaction that committed.
func (d *deferred) committed(delta, digested, runs int64) {
	d.pending.Add(delta)
	d.digested.Store(digested)
	d.runs.Store(runs)
}

// pendingByDigest calls fn with the file key of every pending entry of
// digest key dk: a seek in each run.
func pendingByDigest(tx *bolt.Tx, dk []byte, fn func(fk []byte) error) error {
	var err error
	walkErr := eachRun(tx.Bucket(codec.BucketPending), dk, func(k, _ []byte) bool {
		err = fn(k[codec.RunHeader+len(dk):])
		return err == nil
	})
	return cmp.Or(walkErr, err)
}
