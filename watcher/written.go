package watcher

import (
	"sync"
	"time"
)

// Written paths: a rewrite that sets the mtime back leaves no trace in the
// stat fields that a rename keeps, so a consumer about to give a renamed
// file the record of its old path must know of writes the stat fields do
// not show. The watcher tells it three ways:
//
//   - a write that settles reaches it as a Changed with Written set;
//   - a path written and not yet emitted (or emitted less than
//     writtenGrace ago, so the Changed may still be on its way) counts as
//     written;
//   - a path whose write never reaches it as Changed — the path went away
//     (renamed, deleted, or moved with a directory above) before the write
//     settled, or the write was folded into a directory's Rescan — is
//     remembered for writtenWindow.
//
// The consumer asks WrittenSince.

const (
	writtenWindow = time.Hour
	writtenGrace  = 10 * time.Second
	writtenMax    = 1 << 14
)

// writeLog is shared by a Watcher's roots.
type writeLog struct {
	mu      sync.Mutex
	pending map[string]time.Time // written, not emitted (zero) or emitted at
	at      map[string]time.Time // went away unsettled, noted at
	lostAt  time.Time            // entries of at were dropped then to stay under writtenMax
}

func newWriteLog() *writeLog {
	return &writeLog{pending: make(map[string]time.Time), at: make(map[string]time.Time)}
}

// written records a write to p that will be emitted with p's item.
func (l *writeLog) written(p string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) >= writtenMax {
		for q, t := range l.pending {
			if !t.IsZero() && now.Sub(t) > writtenGrace {
				delete(l.pending, q)
			}
		}
	}
	l.pending[p] = time.Time{}
}

// emitted records that p's write went out as a Changed with Written set.
func (l *writeLog) emitted(p string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[p]; ok {
		l.pending[p] = now
	}
}

// note records that p, written, went away or was folded into a Rescan
// before its write could be emitted.
func (l *writeLog) note(p string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pending, p)
	if len(l.at) >= writtenMax {
		for q, t := range l.at {
			if now.Sub(t) > writtenWindow {
				delete(l.at, q)
			}
		}
	}
	if len(l.at) >= writtenMax {
		// Too many to remember: forget them all, and answer "written"
		// for anything older than now until the window has passed.
		clear(l.at)
		l.lostAt = now
	}
	l.at[p] = now
}

// lose records that writes may have gone unseen (events were lost) at now.
func (l *writeLog) lose(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lostAt = now
}

// since reports whether p was written at or after sinceNs (Unix
// nanoseconds) as far as the log can tell; see WrittenSince.
func (l *writeLog) since(p string, sinceNs int64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.pending[p]; ok {
		if t.IsZero() || now.Sub(t) < writtenGrace {
			return true
		}
		delete(l.pending, p)
	}
	if !l.lostAt.IsZero() && now.Sub(l.lostAt) < writtenWindow && sinceNs <= l.lostAt.UnixNano() {
		return true
	}
	t, ok := l.at[p]
	if ok && now.Sub(t) > writtenWindow {
		delete(l.at, p)
		return false
	}
	return ok && t.UnixNano() >= sinceNs
}

// WrittenSince reports whether a write to path, at or after sinceNs (Unix
// nanoseconds), may have escaped the consumer's notice: the watcher saw
// path written and has not emitted it yet (or emitted it as a Changed with
// Written set less than 10 s ago); or, within the last hour, path was
// renamed or deleted (itself or a directory above it) before its write
// settled, or the write was folded into a directory's Rescan. It also
// reports true when it cannot rule that out, for a record hashed before
// the last time it had too many such paths to remember (more than 16,384)
// or an inotify queue overflow lost events, within the last hour. A consumer about to give
// a file the record of the path it came from asks this about both paths: a
// file rewritten with its mtime set back and renamed at once would
// otherwise keep its old key.
func (w *Watcher) WrittenSince(path string, sinceNs int64) bool {
	return w.writes.since(path, sinceNs, time.Now())
}
