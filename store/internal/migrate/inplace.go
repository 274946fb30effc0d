package migrate

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

// addVerified upgrades a schema-2 index to schema 3 in place: it builds
// the verified index from the records, in transactions of about
// Config.TxSize bytes of keys, since one transaction over 10^7 records
// would hold every new page in memory. The schema version changes in the
// last transaction. A crash or an error before it leaves schema 2 with a
// partial index, which the next open drops and builds again. Nothing else
// changes, so a schema-2 annexd could still read the file.
func addVerified(db *bolt.DB, cfg Config) error {
	err := db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(codec.BucketVerified); err != nil && !errors.Is(err, bolterr.ErrBucketNotFound) {
			return err
		}
		_, err := tx.CreateBucket(codec.BucketVerified)
		return err
	})
	if err != nil {
		return explain(err, cfg.Path)
	}
	return inPlace(db, cfg, chunked{from: 2, step: "verified", chunk: verifiedChunk,
		starting: "store: adding the verification index; the records are read once (on a large index this takes a while)",
		done:     "store: added the verification index"})
}

// chunked is a migration that changes an index where it lies, one chunk
// per transaction: chunk does the work from a key on, in about txSize
// bytes of keys, and says where to go on (nil at the end) and how many
// entries it wrote.
type chunked struct {
	from           uint64 // the schema it upgrades
	step           string // what Config.Hook is told after each chunk
	starting, done string // the log's messages
	chunk          func(db *bolt.DB, from []byte, txSize int) (next []byte, n int, err error)
}

// inPlace runs m's chunks to the end, then sets the schema version
// to m.from+1 in a transaction of its own, so that a crash or an error
// before it leaves the old version, whose next open runs m again.
func inPlace(db *bolt.DB, cfg Config, m chunked) error {
	start := time.Now()
	cfg.Logger.Info(m.starting, "path", cfg.Path, "from", m.from, "to", m.from+1)
	var (
		from    []byte
		entries int
		err     error
	)
	for {
		var n int
		from, n, err = m.chunk(db, from, cfg.TxSize)
		entries += n
		if err == nil {
			err = cfg.Hook(m.step)
		}
		if err != nil || from == nil {
			break
		}
	}
	if err == nil {
		err = db.Update(func(tx *bolt.Tx) error { return setSchema(tx, m.from+1) })
	}
	if err != nil {
		return explain(err, cfg.Path)
	}
	cfg.Logger.Info(m.done, "path", cfg.Path, "from", m.from, "to", m.from+1,
		"entries", entries, "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// verifiedChunk adds the verified-index entries of the records from the
// file key from on, until about txSize bytes of keys, in one
// transaction. It returns where to go on (nil at the end) and how many
// entries it added. The keys are sorted before they are put, so each
// insert lands next to the last one.
func verifiedChunk(db *bolt.DB, from []byte, txSize int) ([]byte, int, error) {
	var (
		next []byte
		kvs  [][2][]byte
	)
	err := db.Update(func(tx *bolt.Tx) error {
		var err error
		next, err = scanChunk(tx.Bucket(codec.BucketFiles).Cursor(), from, txSize, func(k, v []byte) (int, error) {
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
			b.FillPercent = 1 // the chunk lands after every key: fill its pages
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
// txSize, and returns the key to go on from, nil at the end. each
// must not change c's bucket: a cursor must not move over a changing one.
func scanChunk(c *bolt.Cursor, from []byte, txSize int, each func(k, v []byte) (int, error)) ([]byte, error) {
	k, v := c.First()
	if from != nil {
		k, v = c.Seek(from)
	}
	for size := 0; k != nil; k, v = c.Next() {
		if size >= txSize {
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
