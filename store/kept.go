package store

import (
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store/codec"
)

// # Kept writes
//
// A writer that dies without closing the index (a crash, SIGKILL, the OOM
// killer) loses no write of the files it hashed: they stay in the page
// cache, and the kernel writes them back. Only the end of a file system's
// mount loses them: a power cut or a restart of the machine (the boot id
// changes), a disk pulled out, unmounted or shut down in the same boot.
// So the index keeps, beside the run marker, the mounts on which it
// committed records hashed lately (metaMounts): for each file system, the
// mount it was met on (fsstat.MountMark) and the latest hashing of a record
// of it. After an unclean end in the same boot, the records hashed within
// the window before the last commit are not suspect when every mount they
// were hashed on is still up and forces its writes to disk without an
// error (fsstat.Kept). A mount that changed or is gone, one the kernel
// cannot name (before Linux 6.8), a file system met on no mount the
// process could name, or an index whose list is not the last run's,
// leave them suspect, as before.

// metaMounts is the meta key of the mounts list.
var metaMounts = []byte("mounts")

// syncfsTimeout bounds the wait for a file system to force its writes.
const syncfsTimeout = 30 * time.Second

// mountUse is one mount the records of a file system were hashed on.
type mountUse struct {
	fs   uint64 // as Record.Dev
	mark fsstat.MountMark
	last int64 // the latest HashedAt of a record of it committed (Unix ns)
}

// mountUses is this run's list. The write transactions own it.
type mountUses struct {
	run    int64          // Started of the run whose list it is (Unix ns)
	since  int64          // it holds every record committed hashed at or after this (Unix ns)
	window int64          // the run's data window (ns)
	list   []mountUse     // oldest first
	cur    map[uint64]int // fs → index in list of its mount now
	dirty  bool
}

// note records that a record of file system fs hashed at at is committed.
// A record hashed earlier than the window before now cannot be in any
// later window: it is left out (a move of an old record, a settled one).
func (u *mountUses) note(fs uint64, at int64) {
	if u.cur == nil {
		return // not a run's writer (tests of the write transaction alone)
	}
	i, ok := u.cur[fs]
	if ok && u.list[i].last >= at {
		return
	}
	now := time.Now().UnixNano()
	if at < now-u.window {
		return
	}
	mark, _ := fsstat.MarkOf(fs)
	if ok && u.list[i].mark != mark {
		if u.list[i].mark.ID != 0 {
			// A file hashed on the old mount may commit after the change:
			// the old mount counts as used until now.
			u.list[i].last = max(u.list[i].last, now)
		}
		ok = false
	}
	if !ok {
		u.list = append(u.list, mountUse{fs: fs, mark: mark})
		i = len(u.list) - 1
		u.cur[fs] = i
	}
	u.list[i].last = max(u.list[i].last, at)
	u.dirty = true
}

// prune drops the uses older than the window before now.
func (u *mountUses) prune(now int64) {
	keep := u.list[:0]
	for _, m := range u.list {
		if m.last >= now-u.window {
			keep = append(keep, m)
		}
	}
	clear(u.list[len(keep):])
	u.list = keep
	u.cur = map[uint64]int{}
	for i, m := range u.list {
		u.cur[m.fs] = i
	}
}

// keptSince reports whether every mount that a record hashed within prev's
// window before its last commit was met on still keeps its writes
// (fsstat.Kept). uses must be prev's own list.
func keptSince(prev Run, uses mountUses, kept func(fsstat.MountMark) bool) bool {
	from := prev.LastCommit.UnixNano() - int64(prev.Window)
	if uses.since > from {
		return false // records of the window may be missing from the list
	}
	return uses.keptFrom(from, kept) == nil
}

// keptFrom returns the first mount that a record hashed at or after from
// was met on and that does not keep its writes, or nil when all do. Each
// mount is asked once.
func (u *mountUses) keptFrom(from int64, kept func(fsstat.MountMark) bool) *fsstat.MountMark {
	asked := map[fsstat.MountMark]bool{}
	for _, m := range u.list {
		if m.last < from || asked[m.mark] {
			continue
		}
		if !kept(m.mark) {
			return &m.mark
		}
		asked[m.mark] = true
	}
	return nil
}

func keptMount(m fsstat.MountMark) bool { return fsstat.Kept(m, syncfsTimeout) }

const mountsV1 = 1

func (u *mountUses) encode() []byte {
	b := []byte{mountsV1}
	b = binary.AppendVarint(b, u.run)
	b = binary.AppendVarint(b, u.since)
	b = binary.AppendUvarint(b, uint64(len(u.list)))
	for _, m := range u.list {
		b = binary.AppendUvarint(b, m.fs)
		b = binary.AppendUvarint(b, m.mark.ID)
		b = binary.AppendUvarint(b, uint64(len(m.mark.Point)))
		b = append(b, m.mark.Point...)
		b = binary.AppendVarint(b, m.last)
	}
	return b
}

// decodeMounts decodes a mounts list (without its index by file system).
func decodeMounts(b []byte) (u mountUses, err error) {
	if len(b) < 1 || b[0] != mountsV1 {
		return u, fmt.Errorf("%w: mounts list of %d bytes, version %v", ErrCorrupt, len(b), b[:min(len(b), 1)])
	}
	d := &codec.Decoder{B: b[1:]}
	u.run = d.Varint()
	u.since = d.Varint()
	n := d.Uvarint()
	for i := uint64(0); i < n && d.Err == nil; i++ {
		m := mountUse{fs: d.Uvarint()}
		m.mark.ID = d.Uvarint()
		l := d.Uvarint()
		if d.Err == nil && l > uint64(len(d.B)) {
			d.Err = fmt.Errorf("%w: mounts list truncated", ErrCorrupt)
			break
		}
		if d.Err == nil {
			m.mark.Point, d.B = string(d.B[:l]), d.B[l:]
		}
		m.last = d.Varint()
		u.list = append(u.list, m)
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%w: %d trailing bytes in mounts list", ErrCorrupt, len(d.B))
	}
	return u, d.Err
}

// prevUses returns the mounts list the last run left, if it is that run's
// (prev.Started: a version without the list may have run since) and
// decodes; false otherwise.
func prevUses(m *bolt.Bucket, prev Run) (mountUses, bool) {
	v := m.Get(metaMounts)
	if v == nil {
		return mountUses{}, false
	}
	u, err := decodeMounts(v)
	if err != nil || u.run != prev.Started.UnixNano() {
		return mountUses{}, false
	}
	return u, true
}

// begin makes u this run's list: the last run's, carried when it ran in
// this boot and its list is its own, else an empty one that holds the
// records hashed from now on (all of them, when the index has none yet).
func (u *mountUses) begin(tx *bolt.Tx, cur Run, prev mountUses, carried bool) {
	now := cur.Started.UnixNano()
	*u = mountUses{run: now, since: now, window: int64(cur.Window)}
	switch {
	case carried:
		u.since, u.list = prev.since, prev.list
	case empty(tx.Bucket(codec.BucketFiles)):
		u.since = 0
	}
	u.prune(now)
	u.dirty = true
}

func empty(b *bolt.Bucket) bool {
	k, _ := b.Cursor().First()
	return k == nil
}

// stamp writes the list in tx when it changed.
func (u *mountUses) stamp(m *bolt.Bucket) error {
	if !u.dirty || u.cur == nil {
		return nil
	}
	u.dirty = false
	return m.Put(metaMounts, u.encode())
}
