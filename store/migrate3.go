package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"github.com/annexd/annexd/store/codec"
)

// migrateVerified upgrades a schema-2 index to schema 3 in place: it builds
// the verified index from the records, in transactions of about
// migrateTxSize bytes of keys, since one transaction over 10^7 records
// would hold every new page in memory. The schema version changes in the
// last transaction. A crash or an error before it leaves schema 2 with a
// partial index, which the next open drops and builds again. Nothing else
// changes, so a schema-2 annexd could still read the file.
func migrateVerified(db *bolt.DB, path string, opts Options) error {
	err := db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(codec.BucketVerified); err != nil && !errors.Is(err, bolterr.ErrBucketNotFound) {
			return err
		}
		_, err := tx.CreateBucket(codec.BucketVerified)
		return err
	})
	if err != nil {
		return migrateError(err, path)
	}
	return migrateInPlace(db, path, opts, inPlace{from: 2, step: "verified", chunk: verifiedChunk,
		starting: "store: adding the verification index; the records are read once (on a large index this takes a while)",
		done:     "store: added the verification index"})
}

// inPlace is a migration that changes an index where it lies, one chunk
// per transaction: chunk does the work from a key on and says where to go
// on (nil at the end) and how many entries it wrote.
type inPlace struct {
	from           uint64 // the schema it upgrades
	step           string // what migrateHook is told after each chunk
	starting, done string // the log's messages
	chunk          func(db *bolt.DB, from []byte) (next []byte, n int, err error)
}

// migrateInPlace runs m's chunks to the end, then sets the schema version
// to m.from+1 in a transaction of its own, so that a crash or an error
// before it leaves the old version, whose next open runs m again.
func migrateInPlace(db *bolt.DB, path string, opts Options, m inPlace) error {
	start := time.Now()
	opts.Logger.Info(m.starting, "path", path, "from", m.from, "to", m.from+1)
	var (
		from    []byte
		entries int
		err     error
	)
	for {
		var n int
		from, n, err = m.chunk(db, from)
		entries += n
		if err == nil {
			err = migrateHook(m.step)
		}
		if err != nil || from == nil {
			break
		}
	}
	if err == nil {
		err = db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(codec.BucketMeta).Put(codec.MetaSchema, binary.AppendUvarint(nil, m.from+1))
		})
	}
	if err != nil {
		return migrateError(err, path)
	}
	opts.Logger.Info(m.done, "path", path, "from", m.from, "to", m.from+1,
		"entries", entries, "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// verifiedChunk adds the verified-index entries of the records from the
// file key from on, until about migrateTxSize bytes of keys, in one
// transaction. It returns where to go on (nil at the end) and how many
// entries it added. The keys are sorted before they are put, so each
// insert lands next to the last one.
func verifiedChunk(db *bolt.DB, from []byte) ([]byte, int, error) {
	var (
		next []byte
		kvs  [][2][]byte
	)
	err := db.Update(func(tx *bolt.Tx) error {
		var err error
		next, err = scanChunk(tx.Bucket(codec.BucketFiles).Cursor(), from, func(k, v []byte) (int, error) {
			r, err := codec.DecodeRecord(v)
			if err != nil || !r.Audited() {
				return 0, err
			}
			vk := codec.VerifiedKey(nil, r.Checked(), k)
			kvs = append(kvs, [2][]byte{vk, binary.AppendUvarint(nil, uint64(r.Size))})
			return len(vk) + 16, nil
		})
		if err != nil {
			return err
		}
		slices.SortFunc(kvs, func(a, b [2][]byte) int { return bytes.Compare(a[0], b[0]) })
		b := tx.Bucket(codec.BucketVerified)
		if last, _ := b.Cursor().Last(); len(kvs) > 0 && bytes.Compare(kvs[0][0], last) > 0 {
			b.FillPercent = appendFill // the chunk lands after every key: fill its pages
		}
		for _, kv := range kvs {
			if err := b.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		return nil
	})
	return next, len(kvs), err
}

// scanChunk calls each on the entries of c from the key from on (from the
// first when from is nil) until the sizes each returns add up to
// migrateTxSize, and returns the key to go on from, nil at the end. each
// must not change c's bucket: a cursor must not move over a changing one.
func scanChunk(c *bolt.Cursor, from []byte, each func(k, v []byte) (int, error)) ([]byte, error) {
	k, v := c.First()
	if from != nil {
		k, v = c.Seek(from)
	}
	for size := 0; k != nil; k, v = c.Next() {
		if size >= migrateTxSize {
			return bytes.Clone(k), nil
		}
		n, err := each(k, v)
		if err != nil {
			return nil, err
		}
		size += n
	}
	return nil, nil
}
