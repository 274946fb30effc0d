package store

import (
	"bytes"
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/internal/migrate"
)

// migrateTxSize bounds one transaction of a migration (tests make it
// small to migrate in many chunks).
var migrateTxSize = compactTxSize

// migrateHook is called at each step of a migration (migrate.Config.Hook);
// an error stops the migration there. Tests use it to interrupt one.
var migrateHook = func(step string) error { return nil }

// migrateConfig is what package migrate is given to migrate the index at
// path.
func migrateConfig(path string, opts Options) migrate.Config {
	return migrate.Config{Path: path, Logger: opts.Logger, PageSize: pageSize,
		TxSize: migrateTxSize, Hook: migrateHook, Store: migrating{}}
}

// migrating is what package migrate needs of the store (migrate.Store).
type migrating struct{}

// Check runs bbolt's check and the invariants, as Compact checks its copy.
func (migrating) Check(tx *bolt.Tx) error {
	var rep Report
	for err := range tx.Check() {
		rep.add("bbolt: %v", err)
	}
	checkInvariantsSafely(tx, &rep)
	if !rep.OK() {
		return errors.New(rep.Problems[0])
	}
	return nil
}

func (migrating) PendingEntry(v []byte) ([]byte, error) {
	e, err := decodePending(v)
	if err != nil {
		return nil, err
	}
	return append(bytes.Clone(e.dk), e.fk...), nil
}

func (migrating) WriteRun(b *bolt.Bucket, kvs [][2][]byte) error {
	var buf keyBuf
	for _, kv := range kvs {
		buf.add(kv[0], kv[1])
	}
	return writeRun(b, &buf)
}
