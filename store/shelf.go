package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// The shelf keeps the records of file systems that are not where they
// were: a record whose path now holds a file of another file system (a
// second disk mounted where the first was) is shelved rather than
// replaced, and it comes back when its file system does. A record's Dev
// names its file system (fsstat), so the shelf is keyed by be64(Dev) ‖
// path, and its values are records. Shelved records are in no other
// index: they answer no lookup, and count in no total but Shelved
// (codec.BucketShelf).

func shelfKey(buf []byte, dev uint64, path []byte) []byte {
	return append(binary.BigEndian.AppendUint64(buf, dev), path...)
}

// shelve puts r, the record at path, on the shelf, unless it is of the
// file system dev: then it is replaced as any record is.
func (w *wtx) shelve(path []byte, r *Record, dev uint64) error {
	if r.Dev == dev {
		return nil
	}
	w.c.Shelved++
	k := shelfKey(nil, r.Dev, path)
	if w.shelf.Get(k) != nil {
		w.c.Shelved-- // an older one of the same file system: replaced
	}
	return w.shelf.Put(k, codec.AppendRecord(make([]byte, 0, codec.MaxRecordLen), r))
}

// unshelf drops the shelved record of r's file system at path, if any,
// before r is put there: r is what that file system holds there now.
func (w *wtx) unshelf(path []byte, r *Record) error {
	if w.c.Shelved == 0 {
		return nil
	}
	return w.dropShelved(shelfKey(nil, r.Dev, path))
}

// putShelving is OpPut with Change.Shelve: the record at path, when it is
// of another file system than r, goes on the shelf first.
func (w *wtx) putShelving(path []byte, r *Record) error {
	_, old, ok, err := w.lookup(path)
	if err != nil {
		return err
	}
	if ok {
		if err := w.shelve(path, &old, r.Dev); err != nil {
			return err
		}
	}
	return w.put(path, r)
}

// unshelve is OpUnshelve: the shelved record of file system r.Dev at path,
// when it is still expect, replaces the record there, which is shelved in
// turn when it is of another file system and shelve is set. It keeps gen,
// the generation of the scan that found the file.
func (w *wtx) unshelve(path []byte, expect *Record, gen uint64, shelve bool) error {
	k := shelfKey(nil, expect.Dev, path)
	v := w.shelf.Get(k)
	if v == nil {
		return fmt.Errorf("%w: %q is no longer on the shelf", ErrConflict, path)
	}
	r, err := codec.DecodeRecord(v)
	if err != nil {
		return fmt.Errorf("unshelve %q: %w", path, err)
	}
	if !r.SameContent(expect) {
		return fmt.Errorf("%w: the shelved record of %q changed", ErrConflict, path)
	}
	if err := w.shelf.Delete(k); err != nil {
		return err
	}
	w.c.Shelved--
	r.Generation = max(r.Generation, gen)
	if !shelve {
		return w.put(path, &r)
	}
	return w.putShelving(path, &r)
}

// HasShelved reports whether the shelf holds records, as of the last
// commit: a caller can skip looking there when it holds none.
func (s *reader) HasShelved() bool { return s.shelved.Load() > 0 }

// Shelved returns the shelved record of file system dev at path.
func (s *reader) Shelved(dev uint64, path []byte) (Record, bool, error) {
	var (
		r  Record
		ok bool
	)
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(codec.BucketShelf).Get(shelfKey(nil, dev, path))
		if v == nil {
			return nil
		}
		var err error
		r, err = codec.DecodeRecord(v)
		ok = err == nil
		return err
	})
	return r, ok, err
}

// Unshelve brings back the shelved record of file system expect.Dev at
// path, as OpUnshelve; ErrConflict when it is no longer expect.
func (s *Store) Unshelve(ctx context.Context, path []byte, expect Record, gen uint64) error {
	return s.wait(ctx, item{c: Change{Op: OpUnshelve, Path: path, Record: expect, Gen: gen, Shelve: true}})
}

// ShelfCount is how many records of each file system the shelf holds.
func (s *reader) ShelfCount(ctx context.Context) (map[uint64]int, error) {
	out := map[uint64]int{}
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(codec.BucketShelf).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) < 8 {
				return fmt.Errorf("%w: shelf key %x", ErrCorrupt, k)
			}
			out[binary.BigEndian.Uint64(k)]++
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// ForgetShelf drops every shelved record of file system dev, and returns
// how many it dropped.
func (s *Store) ForgetShelf(ctx context.Context, dev uint64) (int, error) {
	n := 0
	for {
		var keys [][]byte
		err := s.view(func(tx *bolt.Tx) error {
			p := binary.BigEndian.AppendUint64(nil, dev)
			c := tx.Bucket(codec.BucketShelf).Cursor()
			for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p) && len(keys) < chunk; k, _ = c.Next() {
				keys = append(keys, bytes.Clone(k))
			}
			return nil
		})
		if err != nil || len(keys) == 0 {
			return n, err
		}
		items := make([]item, len(keys))
		for i, k := range keys {
			items[i] = item{c: Change{Op: opUnshelf, Path: k}}
		}
		if err := s.waitAll(ctx, items); err != nil {
			return n, err
		}
		n += len(keys)
	}
}

// dropShelved deletes the shelf entry k (opUnshelf).
func (w *wtx) dropShelved(k []byte) error {
	if w.shelf.Get(k) == nil {
		return nil
	}
	w.c.Shelved--
	return w.shelf.Delete(k)
}
