package indexer

import (
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
)

// identity is the store's view of what lstat says about a file.
func identity(fi fsstat.FileInfo) store.Identity {
	return store.Identity{Dev: fi.Dev, Ino: fi.Ino, Size: fi.Size, MtimeNs: fi.MtimeNs, CtimeNs: fi.CtimeNs}
}

// ticks knows each file system's timestamp granularity: how long a write
// can hide behind an unchanged mtime.
type ticks struct {
	gran    fsstat.Granularities
	suspect []store.Span // HashedAt spans not to trust (store.Suspect, fixed at Open)
}

// learn probes the granularity of the file system of dev, at path, once.
func (t *ticks) learn(dev uint64, path string) { t.gran.Learn(dev, path) }

// racy reports a racily clean record: the file's ctime is not older than
// the start of its hashing by more than the file system's timestamp
// granularity, so a later write in the same tick could have left the
// identity unchanged (store.RacilyClean). A record hashed just before an
// unclean end is treated alike (store.Trusted): its file's bytes may never
// have reached the disk.
func (t *ticks) racy(rec *store.Record) bool {
	return t.racyTick(rec) || !store.Trusted(rec, t.suspect)
}

// racyTick reports a record racily clean by its timestamps alone.
func (t *ticks) racyTick(rec *store.Record) bool {
	return store.RacilyClean(rec, int64(t.gran.Of(rec.Dev)))
}

// tooFresh returns how long to wait before hashing fi so that its record is
// not racily clean, or 0: its ctime must be older than a tick.
func (t *ticks) tooFresh(fi fsstat.FileInfo) time.Duration {
	age := time.Duration(time.Now().UnixNano() - fi.CtimeNs)
	g := t.gran.Of(fi.Dev)
	if age < 0 || age > g {
		return 0
	}
	return g - age + time.Millisecond
}

// settled reports whether rec still describes the file fi: same identity,
// and either hashed (not racily clean), known to be unreadable, or
// flagged, corrupt or untraced (that finding stands until the file changes).
func (t *ticks) settled(rec *store.Record, fi fsstat.FileInfo) bool {
	if !sameFile(rec, fi) {
		return false
	}
	switch rec.State {
	case store.StateOK:
		return !t.racy(rec)
	case store.StateUnreadable, store.StateCorrupt, store.StateUntraced:
		return true
	}
	return false
}

// current reports whether rec holds the key of the file fi right now.
func (t *ticks) current(rec *store.Record, fi fsstat.FileInfo) bool {
	return rec.State == store.StateOK && sameFile(rec, fi) && !t.racy(rec)
}

// sameFile reports whether rec was recorded from the file fi in its
// present state (fsstat.OnFS says which file system that is).
func sameFile(rec *store.Record, fi fsstat.FileInfo) bool {
	id := identity(fi)
	id.Dev = rec.Dev
	return fsstat.OnFS(rec.Dev, fi) && rec.Identity() == id
}
