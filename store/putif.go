package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// PutIf stores r at path only while the record there is still expect, and
// returns once it is durable; ErrConflict when another writer changed or
// removed the record since expect was read. An audit uses it so that its
// finding never replaces a record the indexer wrote after the audit read
// the old one.
func (s *Store) PutIf(ctx context.Context, path []byte, r, expect Record) error {
	return s.wait(ctx, item{c: Change{Op: OpPutIf, Path: path, Record: r, Expect: expect}})
}

// putIf is OpPutIf.
func (w *wtx) putIf(path []byte, r, expect *Record) error {
	_, old, ok, err := w.lookup(path)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: %q is no longer in the index", ErrConflict, path)
	case !old.SameContent(expect):
		return fmt.Errorf("%w: %q", ErrConflict, path)
	}
	nr := *r
	nr.Generation = old.Generation
	return w.put(path, &nr)
}

// MetaPrefix calls fn for every meta value (PutMeta) whose name starts with
// prefix, in name order. It reads in chunks of short transactions and calls
// fn outside them, so fn may write; fn may return ErrStop.
func (s *reader) MetaPrefix(ctx context.Context, prefix string, fn func(name string, v []byte) error) error {
	from := []byte(prefix)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var batch [][2][]byte
		err := s.view(func(tx *bolt.Tx) error {
			c := tx.Bucket(codec.BucketUser).Cursor()
			for k, v := c.Seek(from); k != nil && bytes.HasPrefix(k, []byte(prefix)) && len(batch) < chunk; k, v = c.Next() {
				batch = append(batch, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, kv := range batch {
			if err := fn(string(kv[0]), kv[1]); err != nil {
				if errors.Is(err, ErrStop) {
					return nil
				}
				return err
			}
		}
		if len(batch) < chunk {
			return nil
		}
		from = successor(batch[len(batch)-1][0])
	}
}
