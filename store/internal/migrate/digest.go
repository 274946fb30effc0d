package migrate

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

// addDigestValues upgrades a schema-4 index to schema 5 in place: every
// digest-index entry gets its record's codec.DigestValue (schema 4 left them
// empty), in transactions of about Config.TxSize bytes, since one
// transaction over 10^7 entries would hold every page of the index in
// memory. The schema version changes in the last transaction. A crash or
// an error before it leaves schema 4 with some values written, which a
// schema-4 annexd ignores and the next open writes again. Pending entries
// (store's pending.go) get theirs when they are merged.
func addDigestValues(db *bolt.DB, cfg Config) error {
	return inPlace(db, cfg, chunked{from: 4, step: "digest", chunk: digestValueChunk,
		starting: "store: adding device and inode numbers to the digest index; its entries are read once (on a large index this takes a while)",
		done:     "store: added device and inode numbers to the digest index"})
}

// digestValueChunk writes the values of the digest-index entries from the
// key from on, until about txSize bytes of keys, in one transaction.
// It returns where to go on (nil at the end) and how many values it wrote.
func digestValueChunk(db *bolt.DB, from []byte, txSize int) ([]byte, int, error) {
	var (
		next []byte
		kvs  [][2][]byte
	)
	err := db.Update(func(tx *bolt.Tx) error {
		files, b := tx.Bucket(codec.BucketFiles), tx.Bucket(codec.BucketDigest)
		var err error
		next, err = scanChunk(b.Cursor(), from, txSize, func(k, v []byte) (int, error) {
			want, err := digestValueOf(files, k)
			if err != nil {
				return 0, err
			}
			if !bytes.Equal(v, want) {
				kvs = append(kvs, [2][]byte{bytes.Clone(k), want})
			}
			return len(k) + 16, nil
		})
		if err != nil {
			return err
		}
		// Put after the walk: a cursor must not move over a changing bucket.
		for _, kv := range kvs {
			if err := b.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		return nil
	})
	return next, len(kvs), err
}

// digestValueOf returns the codec.DigestValue of the record a digest-index key
// points to.
func digestValueOf(files *bolt.Bucket, k []byte) ([]byte, error) {
	if len(k) == 0 {
		return nil, fmt.Errorf("%w: empty digest index key", codec.ErrCorrupt)
	}
	n := 1 + key.Backend(k[0]).DigestLen()
	if n < 2 || len(k) <= n {
		return nil, fmt.Errorf("%w: digest index key %x", codec.ErrCorrupt, k)
	}
	r, err := codec.DecodeRecord(files.Get(k[n:]))
	if err != nil || !r.Indexed() || !bytes.Equal(codec.DigestKey(nil, r.Backend.Base(), r.Digest), k[:n]) {
		return nil, fmt.Errorf("%w: digest index entry %x points to a record without that digest (%v)", codec.ErrCorrupt, k, err)
	}
	return codec.DigestValue(&r), nil
}
