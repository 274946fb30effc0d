package migrate

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// pendingRuns rewrites the pending entries of schema 5, keyed by a
// sequence number each, as one run of schema 6, and adds the bucket of
// deferred inode entries (schema 5 indexed every inode entry at once).
// Schema 5 merged at 131,072 pending entries at most, so one transaction
// carries them, unless its merges had been failing for long.
func pendingRuns(tx *bolt.Tx, st Store) error {
	old := tx.Bucket(codec.BucketPending)
	if old == nil {
		return fmt.Errorf("%w: bucket %q missing", codec.ErrCorrupt, codec.BucketPending)
	}
	var entries, damaged [][2][]byte
	err := old.ForEach(func(k, v []byte) error {
		if e, err := st.PendingEntry(v); err == nil {
			entries = append(entries, [2][]byte{e, bytes.Clone(v)})
		} else {
			// Damage stays for Check to report and fails the merge, as it
			// did before: in run 0, which NextSequence never hands out.
			damaged = append(damaged, [2][]byte{append(make([]byte, codec.RunHeader+1), k...), bytes.Clone(v)})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tx.DeleteBucket(codec.BucketPending); err != nil {
		return err
	}
	b, err := tx.CreateBucket(codec.BucketPending)
	if err != nil {
		return err
	}
	if err := st.WriteRun(b, entries); err != nil {
		return err
	}
	for _, kv := range damaged {
		if err := b.Put(kv[0], kv[1]); err != nil {
			return err
		}
	}
	return createBuckets(tx, codec.BucketPendInodes)
}
