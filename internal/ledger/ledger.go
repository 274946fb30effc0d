// Package ledger keeps one fact for the whole daemon: which files were
// written, and when.
//
// # The rule
//
// A rewrite that sets the mtime back shows only in ctime, which a rename
// changes too; so a record is taken over by a renamed or linked name only
// when the ledger saw no write after the record was hashed. Ask
// [Ledger.WrittenSince] with the record's HashedAt about every name the
// file had and its inode.
//
// # Basics
//
// The watcher records into the ledger; the indexer, and any other part
// that reuses a record, only reads it. Nothing is handed back and forth:
// each entry holds the time of the latest write the watcher saw, taken
// when it read the event. That is never before the real write, so a
// record hashed before a write is always older than its entry. A record
// hashed after the entry was made already holds the write.
//
// Entries are kept per path and per inode (dev, ino), so a file renamed
// twice before anything looked at it is still known by its inode. Three
// marks stand for what the ledger cannot name:
//
//   - a watched directory renamed: every file under it counts as written
//     from then, since a write that follows the rename may reach only the
//     old name's watch; a file that merely moved with its directory keeps
//     its ctime, which is how the consumer tells it apart;
//   - a write of unknown inode (the file was gone before the watcher could
//     stat it): every record hashed before it counts as written for ten
//     minutes;
//   - lost events (an inotify overflow): every record hashed before then
//     counts as written for the hour.
//
// # Limits
//
// Entries live for an hour. Each map holds at most 16,384 of them; when
// one is full, the older half is dropped, and every record hashed before
// the newest dropped entry then counts as written for the hour. So
// pruning turns the answer to "written", never the other way; the cost
// is a hash where a rename could have kept its key. With paths of 130
// bytes, all three maps full take 6.5 MiB.
//
// What the ledger cannot know: writes while the daemon was down, and
// writes in directories the watcher has no watch on.
package ledger

import (
	"path/filepath"
	"slices"
	"sync"
	"time"
)

const (
	window        = int64(time.Hour)
	unknownWindow = int64(10 * time.Minute)
	maxEntries    = 1 << 14
)

type inode struct{ dev, ino uint64 }

// Ledger records writes and answers whether a file was written since a
// time. The zero value is not usable; call New. It is safe for concurrent
// use.
type Ledger struct {
	mu        sync.Mutex
	now       func() int64 // Unix nanoseconds
	max       int          // entries per map
	paths     map[string]int64
	inodes    map[inode]int64
	dirs      map[string]int64 // renamed directories
	lostAt    int64            // events or entries were lost then
	unknownAt int64            // a write of unknown inode was seen then
	prunedAt  int64            // last pruning by age
}

// New returns an empty Ledger on the wall clock, as records' HashedAt.
func New() *Ledger {
	return newLedger(func() int64 { return time.Now().UnixNano() }, maxEntries)
}

func newLedger(now func() int64, max int) *Ledger {
	return &Ledger{now: now, max: max, paths: make(map[string]int64),
		inodes: make(map[inode]int64), dirs: make(map[string]int64)}
}

// Written records a write to the file at path with inode (dev, ino),
// seen now. An ino of 0 means the inode is unknown.
func (l *Ledger) Written(path string, dev, ino uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tick()
	put(l, l.paths, path, t)
	if ino == 0 {
		l.unknownAt = max(l.unknownAt, t)
		return
	}
	put(l, l.inodes, inode{dev, ino}, t)
}

// DirRenamed records that the directory at path was renamed away now.
func (l *Ledger) DirRenamed(path string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	put(l, l.dirs, path, l.tick())
}

// Lost records that writes may have gone unseen now.
func (l *Ledger) Lost() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lostAt = max(l.lostAt, l.tick())
}

// WrittenSince reports whether a write at or after sinceNs (Unix
// nanoseconds) to the file at path, or to inode (dev, ino) under any
// name, may have happened. It answers true when the ledger saw one, when
// a directory above path was renamed since, and when it cannot rule one
// out. An ino of 0 skips the inode.
func (l *Ledger) WrittenSince(path string, dev, ino uint64, sinceNs int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	live := func(at, w int64) bool { return at != 0 && at >= sinceNs && now-at <= w }
	if live(l.lostAt, window) || live(l.unknownAt, unknownWindow) {
		return true
	}
	if at, ok := l.paths[path]; ok && live(at, window) {
		return true
	}
	if at, ok := l.inodes[inode{dev, ino}]; ok && ino != 0 && live(at, window) {
		return true
	}
	if len(l.dirs) == 0 {
		return false
	}
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		if at, ok := l.dirs[d]; ok && live(at, window) {
			return true
		}
		if d == "/" || d == "." {
			return false
		}
	}
}

// tick returns the time now and drops expired entries every quarter
// window, so memory goes back down after a burst.
func (l *Ledger) tick() int64 {
	now := l.now()
	if now-l.prunedAt > window/4 {
		l.prunedAt = now
		expire(l.paths, now)
		expire(l.inodes, now)
		expire(l.dirs, now)
	}
	return now
}

// put records k at t, the later of t and the time k already has. A full
// map first drops its expired entries, then its older half; the newest
// dropped time becomes a loss.
func put[K comparable](l *Ledger, m map[K]int64, k K, t int64) {
	if _, ok := m[k]; !ok && len(m) >= l.max {
		expire(m, t)
		if len(m) >= l.max {
			l.lostAt = max(l.lostAt, dropOlderHalf(m))
		}
	}
	m[k] = max(m[k], t)
}

// expire drops the entries older than the window.
func expire[K comparable](m map[K]int64, now int64) {
	for k, at := range m {
		if now-at > window {
			delete(m, k)
		}
	}
}

// dropOlderHalf drops the older half of m, or more on ties, and returns
// the newest time dropped.
func dropOlderHalf[K comparable](m map[K]int64) int64 {
	times := make([]int64, 0, len(m))
	for _, at := range m {
		times = append(times, at)
	}
	slices.Sort(times)
	cut := times[(len(times)-1)/2]
	for k, at := range m {
		if at <= cut {
			delete(m, k)
		}
	}
	return cut
}
