package store

import (
	"cmp"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// Deferred inode entries (schema 6).
//
// A first scan meets inode numbers in no useful order: a directory's files
// were created at different times, so their numbers are scattered over the
// inode index and each new entry lands on a leaf of its own. At 10^6
// records those random inserts were a seventh of a first scan's CPU time,
// most of it in the leaves they dirtied and the garbage that made.
//
// A group that defers its digest entries (pending.go) therefore defers the
// inode entries of the same records too. A transaction writes its deferred
// inode entries in key order as one run, at the end of the pendinodes
// bucket: be64(run) ‖ id(dev) ‖ id(ino) ‖ file key → ∅. The merge moves
// every run into the inode index in key order, before it merges the digest
// entries (sharesInode reads the inode index), and empties the bucket in
// the same transaction that empties the pending bucket.
//
// The rules:
//   - A record has a pendinodes entry only while its digest entry is
//     pending, so the pending count also tells when a merge is due.
//   - Its inode entry is in the inode index or in pendinodes; in both only
//     after a merge cut short, which the next merge repeats (its puts are
//     idempotent).
//   - A lookup by inode (ByInodeAll) reads the inode index and seeks once
//     in each run, unless the inode filter proves no run names the inode
//     (runfilter.go); a merge is due once maxRuns runs wait (pending.go).
//   - sharesInode reads only the inode index: a record whose inode entry
//     is pending has a pending digest entry, so it is in no group yet, and
//     the merge has moved every inode entry before it groups any record.

// deferInode adds the inode entry ik (id(dev) ‖ id(ino) ‖ file key, the
// first prefix bytes the inode's) to this transaction's run and to the
// inode filter, before the run commits (runfilter.go).
func (t *txRuns) deferInode(ik []byte, prefix int) {
	t.ino.add(ik, nil)
	if t.filter != nil {
		t.filter.add(ik[:prefix])
	}
}

// dropInode removes the deferred inode entry ik, if there is one: from
// this transaction's run, or from a committed one.
func (t *txRuns) dropInode(ik []byte) error {
	if t.ino.remove(ik) {
		return nil
	}
	k, err := t.inoDrops.find(t.pendIno, ik)
	if k == nil || err != nil {
		return err
	}
	return t.pendIno.Delete(k)
}

// pendingByInode calls fn with the file key of every deferred inode entry
// with prefix p (id(dev) ‖ id(ino)): a seek in each run.
func pendingByInode(b *bolt.Bucket, p []byte, fn func(fk []byte) error) error {
	var err error
	walkErr := eachRun(b, p, func(k, _ []byte) bool {
		err = fn(k[codec.RunHeader+len(p):])
		return err == nil
	})
	return cmp.Or(walkErr, err)
}
