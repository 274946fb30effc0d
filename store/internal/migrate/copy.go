package migrate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
	"github.com/annexd/annexd/store/internal/indexfile"
)

// copyKeys upgrades a schema-1 index (directory ids, devices and inode
// numbers as little-endian varints in keys) to schema 2 (ids as codec.AppendID,
// which sorts numerically). Every key of the files, dirnames, bydigest and
// inodes buckets changes, which is too much for one bbolt transaction on a
// large index, so the index is copied into a new file next to it in
// chunks, the copy is checked (bbolt's check, the invariants, the same
// number of entries in every bucket), synced and renamed over the old file
// (the file itself when path is a symlink, keeping its mode and owner). The
// old file is not written: a crash or an error at any point leaves it in
// place, and the next migration removes the copy left behind. The caller
// holds the old file's lock.
func copyKeys(src *bolt.DB, cfg Config) error {
	start := time.Now()
	real, err := filepath.EvalSymlinks(cfg.Path)
	if err != nil {
		return err
	}
	dir := filepath.Dir(real)
	cfg.Logger.Info("store: migrating index to a new schema; it is copied, checked and renamed over the old file (on a large index this takes a while)",
		"path", cfg.Path, "from", 1, "to", 2)
	indexfile.RemoveLeftovers(real, copyPattern(real))
	name, err := indexfile.CreateBeside(real, copyPattern(real))
	var records int
	if err == nil {
		defer os.Remove(name) // after the rename, there is nothing at name
		records, err = writeCopy(src, name, cfg)
	}
	if err == nil {
		err = cfg.Hook("rename")
	}
	if err == nil {
		err = os.Rename(name, real)
	}
	if err != nil {
		return explain(err, real)
	}
	if err := indexfile.SyncDir(dir); err != nil {
		return fmt.Errorf("the migrated index is in place, but syncing its directory failed: %w", err)
	}
	cfg.Logger.Info("store: migrated index", "path", cfg.Path, "from", 1, "to", 2,
		"records", records, "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// writeCopy copies src into the new file name with schema-2 keys,
// syncs and checks the copy, and returns the number of records.
func writeCopy(src *bolt.DB, name string, cfg Config) (int, error) {
	dst, err := bolt.Open(name, 0o600, &bolt.Options{NoSync: true, FreelistType: bolt.FreelistMapType, PageSize: cfg.PageSize})
	if err != nil {
		return 0, err
	}
	defer dst.Close() // closed below; again (a no-op) when a damaged page panics
	want, err := copyBuckets(src, dst, cfg)
	if err == nil {
		err = dst.Sync()
	}
	if err == nil {
		err = checkCopy(dst, want, cfg.Store)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return want[string(codec.BucketFiles)], err
}

// copyPattern is CreateTemp's pattern for the copy of a migration.
func copyPattern(path string) string { return "." + filepath.Base(path) + ".migrate-*" }

// copyBuckets copies src (schema 1) into the empty dst with schema-2 keys
// and returns the number of entries of each bucket of src.
func copyBuckets(src, dst *bolt.DB, cfg Config) (map[string]int, error) {
	want := map[string]int{}
	c := &chunkCopy{db: dst, txSize: cfg.TxSize, hook: cfg.Hook}
	defer func() { // also when a damaged page panics: dst can then be closed
		if c.tx != nil {
			_ = c.tx.Rollback()
		}
	}()
	err := src.View(func(stx *bolt.Tx) error {
		for _, b := range codec.Schema2Buckets {
			if stx.Bucket(b) == nil {
				return fmt.Errorf("%w: bucket %q missing", codec.ErrCorrupt, b)
			}
			want[string(b)] = stx.Bucket(b).Stats().KeyN
		}
		if err := c.begin(); err != nil {
			return err
		}
		for _, b := range codec.Schema2Buckets {
			if _, err := c.tx.CreateBucket(b); err != nil {
				return err
			}
		}
		if err := c.tx.Bucket(codec.BucketDirs).SetSequence(stx.Bucket(codec.BucketDirs).Sequence()); err != nil {
			return err
		}
		for _, step := range []func(*bolt.Tx, *chunkCopy) error{copySame, copyDirs, copyFiles, copyIndex} {
			if err := step(stx, c); err != nil {
				return err
			}
		}
		return c.commit()
	})
	return want, err
}

// copySame copies the buckets whose keys do not change; the schema
// version becomes 2.
func copySame(stx *bolt.Tx, c *chunkCopy) error {
	for _, b := range [][]byte{codec.BucketMeta, codec.BucketUser, codec.BucketGroups, codec.BucketDups} {
		err := stx.Bucket(b).ForEach(func(k, v []byte) error {
			if bytes.Equal(b, codec.BucketMeta) && bytes.Equal(k, codec.MetaSchema) {
				v = binary.AppendUvarint(nil, 2)
			}
			return c.put(b, k, v, true)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// copyDirs re-encodes the directory ids of dirs (values) and dirnames
// (keys, written in id order).
func copyDirs(stx *bolt.Tx, c *chunkCopy) error {
	err := stx.Bucket(codec.BucketDirs).ForEach(func(k, v []byte) error {
		id, ok := v1ID(v)
		if !ok {
			return fmt.Errorf("%w: dirs: %q has id %x", codec.ErrCorrupt, k, v)
		}
		return c.put(codec.BucketDirs, k, codec.IDKey(id), true)
	})
	if err != nil {
		return err
	}
	ids, err := v1DirIDs(stx)
	if err != nil {
		return err
	}
	names := stx.Bucket(codec.BucketDirNames)
	for _, id := range ids {
		if err := c.put(codec.BucketDirNames, codec.IDKey(id), names.Get(binary.AppendUvarint(nil, id)), true); err != nil {
			return err
		}
	}
	return nil
}

// v1DirIDs returns the directory ids of a schema-1 index in numeric order.
func v1DirIDs(stx *bolt.Tx) ([]uint64, error) {
	var ids []uint64
	err := stx.Bucket(codec.BucketDirNames).ForEach(func(k, _ []byte) error {
		id, ok := v1ID(k)
		if !ok {
			return fmt.Errorf("%w: dirnames: bad key %x", codec.ErrCorrupt, k)
		}
		ids = append(ids, id)
		return nil
	})
	slices.Sort(ids)
	return ids, err
}

// copyFiles copies the records directory by directory in id order, so
// the new files bucket is written in key order.
func copyFiles(stx *bolt.Tx, c *chunkCopy) error {
	ids, err := v1DirIDs(stx)
	if err != nil {
		return err
	}
	cur := stx.Bucket(codec.BucketFiles).Cursor()
	for _, id := range ids {
		p := binary.AppendUvarint(nil, id)
		for k, v := cur.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = cur.Next() {
			if err := c.put(codec.BucketFiles, codec.FileKey(nil, id, k[len(p):]), v, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyIndex re-encodes the file keys in the digest index and the inode
// keys. Their order changes (within a digest, and throughout the inode
// index), and bbolt splits the nodes a transaction changed only when it
// commits, so inserting them in the old order would make each insert move
// a growing in-memory node: quadratic. They are re-encoded a chunk at a
// time, sorted, and put in order.
func copyIndex(stx *bolt.Tx, c *chunkCopy) error {
	err := copySorted(stx.Bucket(codec.BucketDigest), codec.BucketDigest, c, func(k []byte) ([]byte, bool) {
		if len(k) == 0 {
			return nil, false
		}
		n := 1 + key.Backend(k[0]).DigestLen()
		if n < 2 || len(k) <= n {
			return nil, false
		}
		fk, ok := v1FileKey(k[n:])
		return append(bytes.Clone(k[:n]), fk...), ok
	})
	if err != nil {
		return err
	}
	return copySorted(stx.Bucket(codec.BucketInodes), codec.BucketInodes, c, func(k []byte) ([]byte, bool) {
		dev, n := binary.Uvarint(k)
		if n <= 0 {
			return nil, false
		}
		ino, m := binary.Uvarint(k[n:])
		if m <= 0 {
			return nil, false
		}
		fk, ok := v1FileKey(k[n+m:])
		return append(codec.InodeKey(nil, dev, ino), fk...), ok
	})
}

// copySorted copies the keys of the set src (values are empty) into
// bucket b of the copy, re-encoded by conv, in sorted chunks of about
// Config.TxSize bytes.
func copySorted(src *bolt.Bucket, b []byte, c *chunkCopy, conv func([]byte) ([]byte, bool)) error {
	var keys [][]byte
	size := 0
	flush := func() error {
		slices.SortFunc(keys, bytes.Compare)
		for _, k := range keys {
			if err := c.put(b, k, nil, false); err != nil {
				return err
			}
		}
		keys, size = keys[:0], 0
		return c.commit()
	}
	cur := src.Cursor()
	for k, _ := cur.First(); k != nil; k, _ = cur.Next() {
		nk, ok := conv(k)
		if !ok {
			return fmt.Errorf("%w: %s: bad key %x", codec.ErrCorrupt, b, k)
		}
		keys = append(keys, nk)
		if size += len(nk); size >= c.txSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// v1ID decodes a schema-1 id that fills b.
func v1ID(b []byte) (uint64, bool) {
	id, n := binary.Uvarint(b)
	return id, n > 0 && n == len(b)
}

// v1FileKey re-encodes a schema-1 file key.
func v1FileKey(fk []byte) ([]byte, bool) {
	id, n := binary.Uvarint(fk)
	if n <= 0 || n == len(fk) {
		return nil, false
	}
	return codec.FileKey(nil, id, fk[n:]), true
}

// chunkCopy writes into a new bbolt file in transactions of about
// Config.TxSize bytes.
type chunkCopy struct {
	db     *bolt.DB
	tx     *bolt.Tx
	size   int
	txSize int                     // Config.TxSize
	hook   func(step string) error // Config.Hook
}

func (c *chunkCopy) begin() (err error) {
	c.tx, err = c.db.Begin(true)
	c.size = 0
	return err
}

func (c *chunkCopy) commit() error {
	if c.tx == nil {
		return nil
	}
	err := c.tx.Commit()
	c.tx = nil
	if err == nil {
		err = c.hook("chunk")
	}
	return err
}

// put stores k → v in bucket b; inOrder says that keys arrive in order,
// so pages may be filled completely.
func (c *chunkCopy) put(b, k, v []byte, inOrder bool) error {
	if c.size >= c.txSize {
		if err := c.commit(); err != nil {
			return err
		}
	}
	if c.tx == nil {
		if err := c.begin(); err != nil {
			return err
		}
	}
	bk := c.tx.Bucket(b)
	if inOrder {
		bk.FillPercent = 1
	}
	c.size += len(k) + len(v)
	return bk.Put(k, v)
}

// checkCopy checks the copy (st.Check) and compares the number of entries
// of every bucket with the original's.
func checkCopy(db *bolt.DB, want map[string]int, st Store) error {
	return db.View(func(tx *bolt.Tx) error {
		if err := st.Check(tx); err != nil {
			return fmt.Errorf("%w: the migrated copy fails its check: %s", codec.ErrCorrupt, err)
		}
		for _, b := range codec.Schema2Buckets {
			if n := tx.Bucket(b).Stats().KeyN; n != want[string(b)] {
				return fmt.Errorf("%w: the migrated copy has %d entries in %s, the index %d", codec.ErrCorrupt, n, b, want[string(b)])
			}
		}
		return nil
	})
}
