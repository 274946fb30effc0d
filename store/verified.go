package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// The verified index orders the records an audit re-reads by when their
// content was last confirmed (schema 3). Its keys are be64(when) ‖ file
// key, its values uvarint(size); when is Record.Checked. A record is in it
// when Record.Audited holds. Keys only grow as records are verified or
// hashed again, so "the least recently verified first" is a walk from the
// first key, and "everything a pass must still read" is the range below
// the time the pass began: nothing to resume but the time itself. A write
// transaction puts its new entries in key order when it ends (txbuf.go):
// the hashers finish files a little out of order, and in order they append.

// txVerified is a write transaction's side of the verified index: its
// new entries, put in key order when it ends (flush), and its removals.
type txVerified struct {
	tx  *bolt.Tx
	run *keyBuf
	buf []byte
}

// bucket returns the index with its fill set for appends: most keys are
// new times at its end, removals come from anywhere.
func (v *txVerified) bucket() *bolt.Bucket {
	b := v.tx.Bucket(codec.BucketVerified)
	b.FillPercent = appendFill
	return b
}

// flush puts the transaction's new entries in key order.
func (v *txVerified) flush() error { return putSorted(v.bucket(), v.run) }

// index adds r, stored under fk, to the verified index.
func (v *txVerified) index(fk []byte, r *Record) {
	if !r.Audited() {
		return
	}
	v.buf = codec.VerifiedKey(v.buf, r.Checked(), fk)
	v.run.add(v.buf, binary.AppendUvarint(nil, uint64(r.Size)))
}

// unindex removes r, stored under fk, from the verified index.
func (v *txVerified) unindex(fk []byte, r *Record) error {
	if !r.Audited() {
		return nil
	}
	v.buf = codec.VerifiedKey(v.buf, r.Checked(), fk)
	// Put then deleted in one transaction is deleted, whatever was there.
	v.run.remove(v.buf)
	return v.bucket().Delete(v.buf)
}

// reindex moves fk's entry when a record replaced in place (same digest,
// inode and size) changed its checked time or its state.
func (v *txVerified) reindex(fk []byte, old, r *Record) error {
	if old.Audited() == r.Audited() && old.Checked() == r.Checked() && old.Size == r.Size {
		return nil
	}
	if err := v.unindex(fk, old); err != nil {
		return err
	}
	v.index(fk, r)
	return nil
}

// Due is one record as ByChecked hands it out.
type Due struct {
	Path   []byte
	Record Record
	// Next is the position after this record, for ByChecked's from.
	Next []byte
}

// CheckedFrom is the ByChecked position of the first record checked at or
// after t.
func CheckedFrom(t int64) []byte { return binary.BigEndian.AppendUint64(nil, codec.TimeKey(t)) }

// ByChecked calls fn for the records an audit re-reads (Record.Audited)
// from the position from (nil: the start; a Due.Next; a CheckedFrom) whose
// Checked time is before before, least recently checked first. Records
// with the same time come in file-key order, so a directory's files are
// read together. It reads in chunks of short transactions and calls fn
// outside them, so fn may write: records it verifies move past before and
// are not met again. fn may return ErrStop.
func (s *reader) ByChecked(ctx context.Context, from []byte, before int64, fn func(d Due) error) error {
	limit := binary.BigEndian.AppendUint64(nil, codec.TimeKey(before))
	cur := bytes.Clone(from)
	names := s.newNamer()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, more, err := s.checkedChunk(names, cur, limit)
		if err != nil {
			return err
		}
		for _, d := range batch {
			if err := fn(d); err != nil {
				if errors.Is(err, ErrStop) {
					return nil
				}
				return err
			}
		}
		if !more {
			return nil
		}
		cur = batch[len(batch)-1].Next
	}
}

func (s *reader) checkedChunk(names *namer, from, limit []byte) ([]Due, bool, error) {
	var batch []Due
	more := false
	err := names.view(func(tx *bolt.Tx, n *namer) error {
		files := tx.Bucket(codec.BucketFiles)
		c := tx.Bucket(codec.BucketVerified).Cursor()
		for k, _ := c.Seek(from); k != nil && bytes.Compare(k, limit) < 0; k, _ = c.Next() {
			if len(batch) == chunk {
				more = true
				return nil
			}
			if len(k) <= 8 {
				return fmt.Errorf("%w: verified: bad key %x", ErrCorrupt, k)
			}
			fk := k[8:]
			path, err := n.path(fk)
			if err != nil {
				return err
			}
			r, err := codec.DecodeRecord(files.Get(fk))
			if err != nil {
				return fmt.Errorf("verified: record of %q: %w", path, err)
			}
			batch = append(batch, Due{Path: path, Record: r, Next: successor(k)})
		}
		return nil
	})
	return batch, more, err
}

// CheckedCount is what CountChecked counts.
type CheckedCount struct {
	Files, Bytes int64
	// Oldest is the least recent Checked time among them; 0 when none.
	Oldest int64
}

// CountChecked counts the records an audit re-reads whose Checked time is
// before the given time, with their sizes. It reads only the verified
// index, about a million entries a second, in short transactions.
func (s *reader) CountChecked(ctx context.Context, before int64) (CheckedCount, error) {
	limit := binary.BigEndian.AppendUint64(nil, codec.TimeKey(before))
	var (
		n    CheckedCount
		from []byte
	)
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		next, err := s.countChunk(from, limit, &n)
		if err != nil || next == nil {
			return n, err
		}
		from = next
	}
}

// CountCheckedUnder is CountChecked of the records at or below one of
// dirs (absolute, clean paths) alone: records left outside them, by runs
// with other roots, are not counted.
func (s *reader) CountCheckedUnder(ctx context.Context, before int64, dirs [][]byte) (CheckedCount, error) {
	ids, err := s.dirIDsUnder(ctx, dirs)
	if err != nil {
		return CheckedCount{}, err
	}
	limit := binary.BigEndian.AppendUint64(nil, codec.TimeKey(before))
	var (
		n    CheckedCount
		from []byte
	)
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		next, err := s.countChunkIn(from, limit, &n, ids)
		if err != nil || next == nil {
			return n, err
		}
		from = next
	}
}

// dirIDsUnder returns the ids of the directories at or below dirs.
func (s *reader) dirIDsUnder(ctx context.Context, dirs [][]byte) (map[uint64]bool, error) {
	ids := map[uint64]bool{}
	for _, d := range dirs {
		prefix := subtreePrefix(d)
		for from := prefix; from != nil; {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			var next []byte
			err := s.view(func(tx *bolt.Tx) error {
				c := tx.Bucket(codec.BucketDirs).Cursor()
				i := 0
				for k, v := c.Seek(from); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
					if i == 16*chunk {
						next = bytes.Clone(k)
						return nil
					}
					i++
					id, ok := codec.ParseIDKey(v)
					if !ok {
						return fmt.Errorf("%w: dirs: bad id of %q", ErrCorrupt, k)
					}
					ids[id] = true
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
			from = next
		}
	}
	return ids, nil
}

// countChunk counts up to 16 chunks of entries from from and returns where
// to go on, or nil at the end.
func (s *reader) countChunk(from, limit []byte, n *CheckedCount) ([]byte, error) {
	return s.countChunkIn(from, limit, n, nil)
}

// countChunkIn is countChunk of the records in the directories of ids
// alone; nil ids: of all.
func (s *reader) countChunkIn(from, limit []byte, n *CheckedCount, ids map[uint64]bool) ([]byte, error) {
	var next []byte
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(codec.BucketVerified).Cursor()
		i := 0
		for k, v := c.Seek(from); k != nil && bytes.Compare(k, limit) < 0; k, v = c.Next() {
			if i == 16*chunk {
				next = bytes.Clone(k)
				return nil
			}
			i++
			size, m := binary.Uvarint(v)
			if m <= 0 || len(k) <= 8 || size > math.MaxInt64 {
				return fmt.Errorf("%w: verified: bad entry %x", ErrCorrupt, k)
			}
			if ids != nil {
				if id, _, ok := codec.SplitFileKey(k[8:]); !ok || !ids[id] {
					continue
				}
			}
			if n.Files == 0 {
				n.Oldest = int64(binary.BigEndian.Uint64(k))
			}
			n.Files++
			n.Bytes += int64(size)
		}
		return nil
	})
	return next, err
}

// checkVerified checks that the verified index holds exactly one entry,
// with the record's size, for each record an audit re-reads (schema 3).
func checkVerified(tx *bolt.Tx, rep *Report) {
	b := tx.Bucket(codec.BucketVerified)
	schema, _ := binary.Uvarint(tx.Bucket(codec.BucketMeta).Get(codec.MetaSchema))
	if b == nil {
		if schema >= 3 {
			rep.add("bucket %q missing", codec.BucketVerified)
		}
		return
	}
	var want int64
	var kbuf []byte
	_ = tx.Bucket(codec.BucketFiles).ForEach(func(fk, v []byte) error {
		r, err := codec.DecodeRecord(v)
		if err != nil || !r.Audited() {
			return nil // a record that does not decode is reported by checkFiles
		}
		want++
		kbuf = codec.VerifiedKey(kbuf, r.Checked(), fk)
		got := b.Get(kbuf)
		if size, n := binary.Uvarint(got); !has(b, kbuf) || n <= 0 || n != len(got) || int64(size) != r.Size {
			rep.add("verified index lacks %x, or holds another size (%x)", fk, got)
		}
		return nil
	})
	checkCount(tx, rep, codec.BucketVerified, want, "verified index")
}
