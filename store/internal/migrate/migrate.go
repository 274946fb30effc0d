package migrate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
	"github.com/annexd/annexd/store/internal/indexfile"
)

// ErrReplaced tells the caller that the file at the path was replaced by
// a migrated copy and must be opened again.
var ErrReplaced = errors.New("store: index migrated")

// Store is what the migrations need of package store.
type Store interface {
	// Check runs bbolt's check and the store's invariants on tx and
	// returns the first problem found, nil when there is none.
	Check(tx *bolt.Tx) error
	// PendingEntry returns the run entry (digest key ‖ file key) of a
	// schema-5 pending value, or an error when it does not decode.
	PendingEntry(v []byte) ([]byte, error)
	// WriteRun writes kvs to the run bucket b as one new run, in key
	// order; of two entries with one key, the later wins.
	WriteRun(b *bolt.Bucket, kvs [][2][]byte) error
}

// Config is what a migration is given.
type Config struct {
	Path     string       // the index as the caller named it (maybe a symlink)
	Logger   *slog.Logger // the migrations' progress
	PageSize int          // the bbolt page size of a copy
	// TxSize bounds one transaction of a copy or of a chunk, in bytes of
	// keys, so memory stays flat.
	TxSize int
	// Hook is called at each step ("chunk" after each committed chunk of
	// a copy, "rename" before the copy replaces the index, "verified" and
	// "digest" after each chunk in place); an error stops the migration
	// there. Tests use it to interrupt one.
	Hook  func(step string) error
	Store Store
}

// Run upgrades db, the index at cfg.Path of schema from, to schema to. It
// returns ErrReplaced after the copy of schema 1 replaced the file: the
// caller opens it again, and Run goes on from schema 2. The caller holds
// the index's lock.
func Run(db *bolt.DB, from, to uint64, cfg Config) error {
	if from == 1 {
		if err := copyKeys(db, cfg); err != nil {
			return fmt.Errorf("store: migrate %s from schema 1: %w", cfg.Path, err)
		}
		return ErrReplaced
	}
	for v := from; v < to; v++ {
		if err := step(db, v, cfg); err != nil {
			return fmt.Errorf("store: migrate %s from schema %d: %w", cfg.Path, v, err)
		}
	}
	return nil
}

// step upgrades db from schema v to v+1.
func step(db *bolt.DB, v uint64, cfg Config) error {
	switch v {
	case 2:
		return addVerified(db, cfg)
	case 4:
		return addDigestValues(db, cfg) // in chunks, not one transaction
	}
	return inOneTx(db, v, cfg.Store)
}

// inOneTx runs the migration from schema v that one transaction carries,
// and sets the schema version in the same transaction.
func inOneTx(db *bolt.DB, v uint64, st Store) error {
	var step func(tx *bolt.Tx) error
	switch v {
	case 3: // Schema 4 defers a large group's digest entries.
		step = func(tx *bolt.Tx) error { return createBuckets(tx, codec.BucketPending) }
	case 5: // Schema 6 writes pending entries in sorted runs and defers inode entries.
		step = func(tx *bolt.Tx) error { return pendingRuns(tx, st) }
	case 6: // Schema 7 keeps surveys of block sharing and a shelf of records.
		step = func(tx *bolt.Tx) error { return createBuckets(tx, codec.BucketSurveys, codec.BucketShelf) }
	case 7: // Schema 8 may hold records in state untraced; those of 7 need no change.
		step = func(*bolt.Tx) error { return nil }
	default:
		return fmt.Errorf("no migration from schema %d", v)
	}
	return db.Update(func(tx *bolt.Tx) error {
		if err := step(tx); err != nil {
			return err
		}
		return setSchema(tx, v+1)
	})
}

func createBuckets(tx *bolt.Tx, names ...[]byte) error {
	for _, name := range names {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	return nil
}

func setSchema(tx *bolt.Tx, v uint64) error {
	return tx.Bucket(codec.BucketMeta).Put(codec.MetaSchema, binary.AppendUvarint(nil, v))
}

// explain explains a failed migration of the index file real: a full
// disk says how much free space the copy needs, and where; a damaged
// index (which check-db cannot open before it is migrated) what to do.
func explain(err error, real string) error {
	switch {
	case errors.Is(err, codec.ErrCorrupt):
		return fmt.Errorf("%w (the index is left as it was: move it away and annexd re-indexes into a new one)", err)
	case !errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w%s (the index is left as it was)", err, indexfile.Hint(err))
	}
	need := int64(1)
	if fi, serr := os.Stat(real); serr == nil {
		need = (fi.Size() + 1<<20 - 1) >> 20
	}
	return fmt.Errorf("%w: %v: the migration writes a copy of the index beside it and needs about %d MiB free in %s; "+
		"free space there and start annexd again (the index is left as it was)", indexfile.ErrNoSpace, err, need, filepath.Dir(real))
}
