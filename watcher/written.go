package watcher

import (
	"path/filepath"
	"sync"
	"time"

	"github.com/annexd/annexd/fsstat"
)

// Written files: a rewrite that sets the mtime back leaves no trace in the
// stat fields that a rename keeps, so a consumer about to give a renamed
// file the record of its old path must know of writes the stat fields do
// not show. The watcher tells it three ways:
//
//   - a write that settles reaches it as a Changed with Written set;
//   - a file written and not yet emitted, or emitted and not yet
//     Delivered (at most writtenGrace after it went out, for consumers
//     that do not call Delivered), counts as written;
//   - a file whose write never reaches it as Changed — its path went away
//     (renamed, deleted, or moved with a directory above) before the write
//     settled, or the write was folded into a directory's Rescan — is
//     remembered for writtenWindow.
//
// Files are remembered by path and, where the watcher could stat them at
// the first write, by inode: a file renamed twice before anything settled
// is known by neither its first nor its last name. The consumer asks
// WrittenSince.

const (
	writtenWindow = time.Hour
	writtenGrace  = 10 * time.Second
	writtenMax    = 1 << 14
	unknownWindow = 10 * time.Minute
)

// inodeID names a file for the write log; the zero value is unknown.
type inodeID struct{ dev, ino uint64 }

func inodeOf(p string) inodeID {
	fi, err := fsstat.Lstat(p)
	if err != nil || !fi.Mode.IsRegular() {
		return inodeID{}
	}
	return inodeID{fi.Dev, fi.Ino}
}

// writeLog is shared by a Watcher's roots.
type writeLog struct {
	mu        sync.Mutex
	pending   map[string]time.Time  // written, not emitted (zero) or emitted at
	pendingIn map[inodeID]time.Time // the same by inode
	inodeOf   map[string]inodeID    // the inode of each pending path, where known
	at        map[string]time.Time  // went away unsettled, noted at
	atIn      map[inodeID]time.Time // the same by inode
	moved     map[string]time.Time  // watched directories renamed, at: see dirRenamed
	lostAt    time.Time             // entries were dropped, or events lost, then
	unknownAt time.Time             // a file went away written before its inode was known
}

func newWriteLog() *writeLog {
	return &writeLog{pending: make(map[string]time.Time), pendingIn: make(map[inodeID]time.Time),
		inodeOf: make(map[string]inodeID), at: make(map[string]time.Time), atIn: make(map[inodeID]time.Time),
		moved: make(map[string]time.Time)}
}

// dirRenamed records that the watched directory p was renamed at now. Its
// watches go with its old name, and a write under it that comes before
// its new name is watched reaches no watch the watcher still reads: every
// file under p counts as written from then (the consumer knows a file
// moved with its directory and not written since by its unchanged ctime).
func (l *writeLog) dirRenamed(p string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.moved) >= writtenMax {
		prune(l.moved, now, writtenWindow, false)
	}
	if len(l.moved) >= writtenMax {
		clear(l.moved)
		l.lostAt = now
	}
	l.moved[p] = now
}

// movedAbove reports a directory above p renamed at or after sinceNs,
// within the window.
func movedAbove(m map[string]time.Time, p string, sinceNs int64, now time.Time) bool {
	if len(m) == 0 {
		return false
	}
	for a := filepath.Dir(p); ; a = filepath.Dir(a) {
		if t, ok := m[a]; ok && now.Sub(t) <= writtenWindow && t.UnixNano() >= sinceNs {
			return true
		}
		if a == "/" || a == "." {
			return false
		}
	}
}

// written records a write to p (inode id) that will be emitted with p's item.
func (l *writeLog) written(p string, id inodeID, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) >= writtenMax || len(l.pendingIn) >= writtenMax {
		prune(l.pending, now, writtenGrace, true)
		prune(l.pendingIn, now, writtenGrace, true)
		for q := range l.inodeOf {
			if _, ok := l.pending[q]; !ok {
				delete(l.inodeOf, q)
			}
		}
	}
	l.pending[p] = time.Time{}
	if id != (inodeID{}) {
		l.pendingIn[id] = time.Time{}
		l.inodeOf[p] = id
	}
}

// delivered forgets p's write once the consumer holds it, unless p was
// written again since it went out.
func (l *writeLog) delivered(p string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.pending[p]; !ok || t.IsZero() {
		return
	}
	delete(l.pending, p)
	if id, ok := l.inodeOf[p]; ok {
		if t := l.pendingIn[id]; !t.IsZero() {
			delete(l.pendingIn, id)
		}
		delete(l.inodeOf, p)
	}
}

// emitted records that p's write went out as a Changed with Written set.
func (l *writeLog) emitted(p string, id inodeID, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[p]; ok {
		l.pending[p] = now
	}
	if _, ok := l.pendingIn[id]; ok {
		l.pendingIn[id] = now
	}
}

// note records that p (inode id), written, went away or was folded into a
// Rescan before its write could be emitted.
func (l *writeLog) note(p string, id inodeID, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pending, p)
	delete(l.pendingIn, id)
	delete(l.inodeOf, p)
	if len(l.at) >= writtenMax || len(l.atIn) >= writtenMax {
		prune(l.at, now, writtenWindow, false)
		prune(l.atIn, now, writtenWindow, false)
	}
	if len(l.at) >= writtenMax || len(l.atIn) >= writtenMax {
		// Too many to remember: forget them all, and answer "written"
		// for anything older than now until the window has passed.
		clear(l.at)
		clear(l.atIn)
		l.lostAt = now
	}
	l.at[p] = now
	if id != (inodeID{}) {
		l.atIn[id] = now
	} else {
		// Renamed before the watcher could stat it: under its new name
		// it is known by neither, so any file counts as written for a
		// while.
		l.unknownAt = now
	}
}

// prune drops the entries older than age (with keepZero, zero times stay).
func prune[K comparable](m map[K]time.Time, now time.Time, age time.Duration, keepZero bool) {
	for k, t := range m {
		if (!t.IsZero() || !keepZero) && now.Sub(t) > age {
			delete(m, k)
		}
	}
}

// lose records that writes may have gone unseen (events were lost) at now.
func (l *writeLog) lose(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lostAt = now
}

// since reports whether the file at p with inode id was written at or
// after sinceNs (Unix nanoseconds) as far as the log can tell; see
// WrittenSince.
func (l *writeLog) since(p string, id inodeID, sinceNs int64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pendingSince(l.pending, p, now) || (id != (inodeID{}) && pendingSince(l.pendingIn, id, now)) {
		return true
	}
	if recent(l.lostAt, now, writtenWindow, sinceNs) || recent(l.unknownAt, now, unknownWindow, sinceNs) {
		return true
	}
	return atSince(l.at, p, sinceNs, now) || (id != (inodeID{}) && atSince(l.atIn, id, sinceNs, now)) ||
		movedAbove(l.moved, p, sinceNs, now)
}

// recent reports that t is within window of now and a record hashed at
// sinceNs predates it.
func recent(t, now time.Time, window time.Duration, sinceNs int64) bool {
	return !t.IsZero() && now.Sub(t) < window && sinceNs <= t.UnixNano()
}

func pendingSince[K comparable](m map[K]time.Time, k K, now time.Time) bool {
	t, ok := m[k]
	if ok && !t.IsZero() && now.Sub(t) >= writtenGrace {
		delete(m, k)
		return false
	}
	return ok
}

func atSince[K comparable](m map[K]time.Time, k K, sinceNs int64, now time.Time) bool {
	t, ok := m[k]
	if ok && now.Sub(t) > writtenWindow {
		delete(m, k)
		return false
	}
	return ok && t.UnixNano() >= sinceNs
}

// Delivered tells the watcher that the consumer has taken ev and will act
// on it: a Changed with Written set then no longer counts in WrittenSince,
// since the consumer knows of the write itself. A consumer that does not
// call it gets that answer for 10 s after the event went out.
func (w *Watcher) Delivered(ev Event) {
	if ev.Kind == Changed && ev.Written {
		w.writes.delivered(ev.Path)
	}
}

// WrittenSince reports whether a write at or after sinceNs (Unix
// nanoseconds) to the file at path, or to inode (dev, ino) under any name,
// may have escaped the consumer's notice: the watcher saw it written and
// has not emitted it yet, or emitted it as a Changed with Written set that
// was not Delivered (for at most 10 s); or, within the last hour, it was renamed or deleted
// (itself or a directory above it) before its write settled, or the write
// was folded into a directory's Rescan, or a directory above path was
// renamed (a write under it before its new name is watched goes unseen;
// ask about the path the file had then). It also reports true, for a record
// hashed before then, within an hour of the last time the watcher had too
// many such files to remember (more than 16,384) or an inotify queue
// overflow lost events, and within 10 minutes of the last time a written
// file went away before the watcher could stat it (renamed within a
// moment of the write). A consumer about to give a file the record of the
// path it came from asks this about both paths: a file rewritten with its
// mtime set back and renamed at once would otherwise keep its old key.
func (w *Watcher) WrittenSince(path string, dev, ino uint64, sinceNs int64) bool {
	return w.writes.since(path, inodeID{dev, ino}, sinceNs, time.Now())
}
