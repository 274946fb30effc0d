package indexer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/annexd/annexd/store"
	"github.com/annexd/annexd/store/codec"
)

// Displaced records. A flagged record (corrupt, untraced, or unreadable
// with the last key known good) holds a finding about its inode's bytes.
// When another inode takes its path (two files swap names, or one is
// renamed over it, while nothing watched), the check of that path writes
// the newcomer's record over it; if the flagged inode's new name is checked
// after that, the index holds no name of the inode any more, and the rotten
// bytes would be hashed as if new: the finding lost, the rot taken for the
// file's key. So before anything is written over such a record, the checker
// keeps it under its inode (displaced.keep): in memory, and in the index's
// meta (displacedMeta), submitted ahead of the write that replaces it, so
// a restart between the two writes keeps it too. The renamer reads it when
// the index holds no name of the file's inode (gather), and the file is
// hashed held against it (judge). A record is kept only when the index
// holds no other name of its inode (a hard link, or the new name checked
// first, holds the finding already). An entry is dropped once a check
// writes a record of its inode; when the first scans of every root have
// ended complete, and the checks they queued with them, every entry made
// until then (a walk that met the inode checked it: what is left is
// gone); and after that, an entry is believed for displacedLife only: a
// rename's other name is checked within seconds of its event. An entry
// that outlived its inode could otherwise name a new file in the reused
// inode corrupt where the file system keeps no birth time.

// displacedMeta prefixes the meta names of displaced records:
// displacedMeta ‖ %016x dev ‖ "/" ‖ %016x ino.
const displacedMeta = "indexer.displaced/"

// displacedLife is how long an entry made after the first scans is
// believed.
const displacedLife = 10 * time.Minute

// displacedRecord is a flagged record whose path another inode took.
type displacedRecord struct {
	path   string       // where it was recorded
	rec    store.Record // its record there
	madeAt int64        // when it was kept (Unix ns)
}

// displaced holds the displaced records by inode.
type displaced struct {
	st  *store.Store
	log *slog.Logger

	mu sync.Mutex
	by map[inode]displacedRecord
	// settledAt: when the first scans and their checks ended (Unix ns);
	// 0 until then. Entries made since are believed for displacedLife.
	settledAt int64
}

// newDisplaced reads the displaced records kept in st's meta.
func newDisplaced(st *store.Store, log *slog.Logger) *displaced {
	d := &displaced{st: st, log: log, by: map[inode]displacedRecord{}}
	err := st.MetaPrefix(context.Background(), displacedMeta, func(name string, v []byte) error {
		var id inode
		dr, err := decodeDisplaced(v)
		if err == nil {
			_, err = fmt.Sscanf(name[len(displacedMeta):], "%016x/%016x", &id.dev, &id.ino)
		}
		if err != nil {
			log.Warn("a displaced record in the index does not decode; it is dropped", "name", name, "err", err)
			st.Submit(store.Change{Op: store.OpDeleteMeta, Path: []byte(name)}, nil)
			return nil
		}
		d.by[id] = dr
		return nil
	})
	if err != nil {
		log.Error("cannot read the displaced records of the index", "err", err)
	}
	return d
}

// displaceable reports whether rec holds a finding that must follow its
// inode: flagged, or unreadable with the last key known good.
func displaceable(rec *store.Record) bool {
	return rec.HasDigest() && (rec.State.Flagged() || rec.State == store.StateUnreadable)
}

// keepGone keeps rec, recorded at path, before a drop or a sweep deletes
// it because nothing is at path any more, when it is flagged and the index
// holds no other name of its inode. A file renamed faster than the
// indexer applies the move is found gone at its old name (a scan of the
// folder it left, a check of the path) before the move reaches its new
// one; without the entry the new name was hashed as a new file, and a
// rotten file's bytes became its key.
func (d *displaced) keepGone(path string, rec *store.Record) {
	if displaceable(rec) && !otherNames(d.st, path, rec) {
		d.keep(path, *rec, time.Now().UnixNano(), "its file is gone from its path")
	}
}

// keep keeps rec, recorded at path, before another inode's record is
// written there, or before it is deleted (keepGone); why says which, for
// the log. The same record kept again is not written again.
func (d *displaced) keep(path string, rec store.Record, nowNs int64, why string) {
	id := inode{rec.Dev, rec.Ino}
	d.mu.Lock()
	if old, ok := d.by[id]; ok && old.path == path && old.rec.HashedAt == rec.HashedAt &&
		old.rec.State == rec.State && old.rec.Identity() == rec.Identity() {
		d.mu.Unlock()
		return
	}
	dr := displacedRecord{path: path, rec: rec, madeAt: nowNs}
	d.by[id] = dr
	d.mu.Unlock()
	d.log.Debug("a flagged record is kept for its inode", "path", path, "why", why, "state", rec.State.String())
	d.st.Submit(store.Change{Op: store.OpPutMeta, Path: []byte(displacedName(id)), Value: encodeDisplaced(&dr)},
		func(err error) {
			if err != nil {
				d.log.Warn("cannot keep a displaced record in the index", "path", path, "err", err)
			}
		})
}

// get returns the displaced record of inode (dev, ino), if there is one
// still believed at nowNs.
func (d *displaced) get(dev, ino uint64, nowNs int64) (displacedRecord, bool) {
	d.mu.Lock()
	dr, ok := d.by[inode{dev, ino}]
	stale := ok && d.settledAt != 0 && dr.madeAt >= d.settledAt && nowNs-dr.madeAt > int64(displacedLife)
	d.mu.Unlock()
	if stale {
		d.drop(dev, ino, dr.madeAt)
		return displacedRecord{}, false
	}
	return dr, ok
}

// written forgets the displaced record of inode (dev, ino), if there is
// one: a record of the inode was written (submitted before this).
func (d *displaced) written(dev, ino uint64) {
	d.mu.Lock()
	dr, ok := d.by[inode{dev, ino}]
	d.mu.Unlock()
	if ok {
		d.drop(dev, ino, dr.madeAt)
	}
}

// settled notes that the first scans and their checks ended at nowNs, and
// drops the entries made until then when every scan was complete.
func (d *displaced) settled(nowNs int64, complete bool) {
	d.mu.Lock()
	d.settledAt = nowNs
	d.mu.Unlock()
	if complete {
		d.expire(nowNs)
	}
}

// drop forgets the displaced record of inode (dev, ino), if it is still the
// one made at madeAt: the inode has a record again.
func (d *displaced) drop(dev, ino uint64, madeAt int64) {
	id := inode{dev, ino}
	d.mu.Lock()
	dr, ok := d.by[id]
	if !ok || dr.madeAt != madeAt {
		d.mu.Unlock()
		return
	}
	delete(d.by, id)
	d.mu.Unlock()
	d.st.Submit(store.Change{Op: store.OpDeleteMeta, Path: []byte(displacedName(id))}, nil)
}

// expire drops the displaced records made before beforeNs.
func (d *displaced) expire(beforeNs int64) {
	d.mu.Lock()
	old := map[inode]int64{}
	for id, dr := range d.by {
		if dr.madeAt < beforeNs {
			old[id] = dr.madeAt
		}
	}
	d.mu.Unlock()
	for id, madeAt := range old {
		d.drop(id.dev, id.ino, madeAt)
	}
}

func displacedName(id inode) string {
	return fmt.Sprintf("%s%016x/%016x", displacedMeta, id.dev, id.ino)
}

// encodeDisplaced encodes dr as be64(madeAt) ‖ uvarint(len(path)) ‖ path ‖
// the record.
func encodeDisplaced(dr *displacedRecord) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(dr.madeAt))
	b = binary.AppendUvarint(b, uint64(len(dr.path)))
	b = append(b, dr.path...)
	return codec.AppendRecord(b, &dr.rec)
}

var errDisplaced = errors.New("indexer: bad displaced record")

func decodeDisplaced(b []byte) (displacedRecord, error) {
	var dr displacedRecord
	if len(b) < 8 {
		return dr, errDisplaced
	}
	dr.madeAt = int64(binary.BigEndian.Uint64(b))
	n, k := binary.Uvarint(b[8:])
	if k <= 0 || uint64(len(b)-8-k) < n {
		return dr, errDisplaced
	}
	dr.path = string(b[8+k : 8+k+int(n)])
	rec, err := codec.DecodeRecord(b[8+k+int(n):])
	if err != nil {
		return dr, err
	}
	dr.rec = rec
	return dr, nil
}
