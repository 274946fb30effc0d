package hub

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// reindexChunk bounds the records one transaction of an upgrade indexes.
const reindexChunk = 50000

var versionKey = []byte("version")

// readVersion is the view's layout: 1 before the meta bucket existed, 0
// for a view with nothing in it yet.
func readVersion(tx *bolt.Tx) uint64 {
	if b := tx.Bucket(bucketMeta).Get(versionKey); b != nil {
		n, _ := strconv.ParseUint(string(b), 10, 64)
		return n
	}
	if k, _ := tx.Bucket(bucketHosts).Cursor().First(); k != nil {
		return 1
	}
	return 0
}

func writeVersion(tx *bolt.Tx) error {
	return tx.Bucket(bucketMeta).Put(versionKey, []byte(strconv.Itoa(viewVersion)))
}

// upgrade brings a view of layout from up to viewVersion. Version 1 kept
// the same files bucket: the buckets derived from it are rebuilt, a chunk
// a transaction. The version is written last, so an upgrade cut short
// starts over at the next open.
func (v *view) upgrade(from uint64) error {
	switch {
	case from == 0:
		return v.db.Update(writeVersion)
	case from > viewVersion:
		return fmt.Errorf("%w: the view has layout %d; this annexd knows up to %d (a newer annexd made it)", ErrConfig, from, viewVersion)
	}
	v.log.Info("hub: rebuilding the view's content index (once, after an upgrade)", "from", from, "to", viewVersion)
	err := v.db.Update(func(tx *bolt.Tx) error {
		for _, name := range derivedBuckets {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		return nil
	})
	var after []byte
	for more := true; err == nil && more; {
		err = v.db.Update(func(tx *bolt.Tx) error {
			var err error
			after, more, err = reindex(tx, after)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("upgrade from layout %d: %w", from, err)
	}
	return v.db.Update(writeVersion)
}

// reindex indexes up to reindexChunk file records after the key after by
// content, and returns the last key it read and whether more follow.
func reindex(tx *bolt.Tx, after []byte) (last []byte, more bool, err error) {
	c := tx.Bucket(bucketFiles).Cursor()
	n := 0
	for k, val := resume(c, nil, after); k != nil; k, val = c.Next() {
		if n == reindexChunk {
			return last, true, nil
		}
		if len(k) < 5 {
			return nil, false, fmt.Errorf("hub: file key %x", k)
		}
		b, d, size, _, err := decodeFile(val)
		if err != nil {
			return nil, false, err
		}
		w := &vtx{tx: tx, h: &hostRec{Num: binary.BigEndian.Uint32(k)}}
		if err := w.index(bytes.Clone(k), contentKey(b, d, size)); err != nil {
			return nil, false, err
		}
		last, n = bytes.Clone(k), n+1
	}
	return last, false, nil
}

// prune removes the hosts the configuration no longer lists, with their
// records, a chunk a transaction: only configured hosts are answered for.
func (v *view) prune() error {
	var gone []*hostRec
	for name, h := range v.hosts {
		if !v.known[name] {
			gone = append(gone, h)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].Name < gone[j].Name })
	for _, h := range gone {
		records := h.Records
		for done := false; !done; {
			err := v.db.Update(func(tx *bolt.Tx) error {
				w := newVtx(tx, h)
				n, err := w.removeWhere(sweepChunk, func(uint64) bool { return true })
				if err != nil || n == sweepChunk {
					return err
				}
				done = true
				return tx.Bucket(bucketHosts).Delete([]byte(h.Name))
			})
			if err != nil {
				return fmt.Errorf("remove host %q: %w", h.Name, err)
			}
		}
		v.mu.Lock()
		delete(v.hosts, h.Name)
		delete(v.byNum, h.Num)
		v.mu.Unlock()
		v.log.Warn("hub: a host no longer in the configuration; its records are removed", "host", h.Name, "records", records)
	}
	return nil
}
