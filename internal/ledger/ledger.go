// Package ledger keeps one fact for the whole daemon: which files were
// written, and when.
//
// # The answer
//
// [Ledger.Since] answers for one file, by its path and its inode, since a
// time (a record's HashedAt):
//
//   - Written: the watcher saw a write to that path or that inode;
//   - Unsure: it saw none, but a doubt covers the file (see below), so
//     one may have gone unseen;
//   - NotWritten: it saw none, and no doubt covers the file.
//
// # The rule
//
// Uncertainty is not an edit. Only Written witnesses a write, beside the
// stat fields a write changes (size, mtime). So a consumer that finds
// other bytes than its record's, with neither witness, keeps the record's
// key and reports the change (internal/audit, internal/indexer). Unsure
// only ever costs work: a renamed file is hashed instead of taking over
// the record of its old name, since a rename moves ctime and so hides a
// rewrite that set the mtime back; dedup leaves such a file alone.
//
// # Basics
//
// The watcher records into the ledger; the indexer, the audit and dedup
// only read it. Each entry holds the time of the latest write the
// watcher saw, taken when it read the event. That is never before the
// real write, so a record hashed before a write is always older than its
// entry. A record hashed after the entry was made already holds the write.
//
// Entries are kept per path and per inode (dev, ino), so a file renamed
// twice before anything looked at it is still known by its inode. A path
// entry keeps the inode written there, so a write to the file a path held
// before a rename replaced it is not taken for a write to the new one.
// When writes to several inodes were seen at one path (names swapped
// while files were written), a file at that path written as none of them
// is Unsure there: the path's writes are known to have gone elsewhere,
// but the path saw churn.
// Doubts are as narrow as the facts allow:
//
//   - a watched directory renamed: the files under its old name, for the
//     hour, since a write that follows the rename may reach only the old
//     name's watch;
//   - a write of unknown inode (the file was gone before the watcher could
//     stat it, as with a temporary file renamed or deleted at once): the
//     files in the same directory, for ten minutes;
//   - lost events (an inotify overflow): the files under that root, for
//     the hour;
//   - a write whose inode the watcher could not tell (Doubted: a file was
//     renamed in or created at its path between the write and the
//     watcher's stat of the path): the file at that path, for the hour.
//
// # Hard links
//
// inotify reports a write under the name written alone. The watcher
// stats that name for the inode; when it cannot (the file, or a
// directory above it, moved before the watcher read the event), the
// write is kept by path alone, and counts for the file at that path, or
// moved from it, when asked. The file's other names hear of it only by
// that name. So a reader that finds other bytes in a file asks about
// every name the index records for its inode ([SinceNames]): a write seen
// at one name of an inode, to that inode or of unknown inode, went to
// the file.
//
// A write of unknown inode at a path counts for the file there when it
// was seen, not for one that came to the path after it (a rotten file
// renamed onto the name of a temporary file just written and removed,
// say): the watcher tells of each file created or renamed in at a path,
// and of each directory (Arrived), and a write of unknown inode before
// such an arrival at the path, or at a directory above it, is Unsure for
// the file that arrived, Written still for the file that left.
//
// A write that follows a directory's rename may be reported under the
// directory's old name, by the watches the watcher has not dropped yet.
// So once the watcher has paired the move (DirMoved), a file under the new
// name is also asked about under the old one, for writes seen up to a
// minute after the move.
//
// # Limits
//
// Entries live for an hour. Each map holds at most 16,384 of them; when
// one is full, the older half is dropped, and every record hashed before
// the newest dropped entry then is Unsure, under any path, for the hour.
// So pruning turns an answer from Written to Unsure at worst, never to
// NotWritten. With paths of 130 bytes, all maps full take about 10 MiB.
//
// # Clock steps
//
// Entries and records' HashedAt are on the wall clock, which can step
// back (date -s, a clock put right). A write seen after such a step is
// stamped earlier than a record hashed before it, yet came after it. So
// the ledger counts the steps back it notices (eras), and an entry of a
// later era than a record's hash is after it, whatever the times say. A
// record hashed later than the clock reads now was hashed before the last
// step, or before the ledger began (every entry is after it then: a clock
// set back while the daemon was down). Otherwise the hash is taken to be
// of this era: a hash made before a step back whose time the clock has
// reached again is taken for one made after it. The steps only ever add
// writes: an entry still counts when its time is later than the hash's.
//
// What the ledger cannot know: writes while the daemon was down, writes
// in directories the watcher has no watch on, and a write made in the
// moment between a directory's rename and the watch of its new name
// (inotify drops the old watch's events once it is removed).
package ledger

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Answer is what the ledger knows of the writes to one file since a time.
type Answer uint8

// The answers, from the weakest witness to the strongest.
const (
	// NotWritten: no write was seen, and no doubt covers the file.
	NotWritten Answer = iota
	// Unsure: no write was seen, but one may have gone unseen.
	Unsure
	// Written: a write to the file's path or inode was seen.
	Written
)

var answerNames = [...]string{"not written", "unsure", "written"}

func (a Answer) String() string {
	if int(a) < len(answerNames) {
		return answerNames[a]
	}
	return "Answer(?)"
}

const (
	window        = int64(time.Hour)
	unknownWindow = int64(10 * time.Minute)
	maxEntries    = 1 << 14
	// moveSlack bounds how long after a directory's move a write may still
	// be reported under its old name: the events queued before the watcher
	// dropped the old watches.
	moveSlack = int64(time.Minute)
	maxHops   = 4 // moves followed back from one path
)

type inode struct{ dev, ino uint64 }

// move is a directory's move: its old name, and when the watcher paired it.
type move struct {
	from string
	at   int64
}

// several is a path entry's inode when writes to more than one known
// inode were seen at the path.
var several = inode{math.MaxUint64, math.MaxUint64}

// stamp is an entry: when it was last touched and, for a path, the inode
// written there. The inode is zero when unknown (which wins over any
// other), and several when writes to more than one inode were seen.
type stamp struct {
	at  int64
	era uint32 // the steps back of the clock seen before it (# Clock steps)
	id  inode
}

// after reports whether s may be of a write at or after a hash at since
// in era: a later time, or a later era.
func (s stamp) after(since int64, era int64) bool {
	return s.at >= since || int64(s.era) > era
}

// Ledger records writes and answers whether a file was written since a
// time. The zero value is not usable; call New. It is safe for concurrent
// use.
type Ledger struct {
	mu       sync.Mutex
	now      func() int64 // Unix nanoseconds
	max      int          // entries per map
	paths    map[string]stamp
	inodes   map[inode]stamp
	dirs     map[string]stamp // renamed directories: the files under them
	unknown  map[string]stamp // writes of unknown inode: the files in that directory
	doubts   map[string]stamp // writes the watcher could not tell the inode of: the file at that path
	arrivals map[string]stamp // files (by inode) and directories (inode zero) that came to a path after a write of unknown inode there
	lost     map[string]stamp // roots that lost events: the files under them
	moves    map[string]move  // directories moved, by their new name
	lostAt   int64            // entries were dropped then: every file
	prunedAt int64            // last pruning by age
	last     int64            // the clock's last reading
	era      uint32           // the steps back of the clock seen
}

// New returns an empty Ledger on the wall clock, as records' HashedAt.
func New() *Ledger {
	return newLedger(func() int64 { return time.Now().UnixNano() }, maxEntries)
}

func newLedger(now func() int64, max int) *Ledger {
	return &Ledger{now: now, max: max, paths: make(map[string]stamp), inodes: make(map[inode]stamp),
		dirs: make(map[string]stamp), unknown: make(map[string]stamp), lost: make(map[string]stamp),
		doubts: make(map[string]stamp), arrivals: make(map[string]stamp),
		moves: make(map[string]move), last: now()}
}

// Written records a write to the file at path with inode (dev, ino),
// seen now. An ino of 0 means the inode is unknown.
func (l *Ledger) Written(path string, dev, ino uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tick()
	id := inode{dev, ino}
	if ino == 0 {
		id = inode{}
	}
	put(l, l.paths, path, stamp{t, l.era, id})
	if ino == 0 {
		put(l, l.unknown, filepath.Dir(path), stamp{at: t, era: l.era})
		return
	}
	put(l, l.inodes, id, stamp{at: t, era: l.era})
}

// Doubted records a write seen now at path to a file the watcher could
// not tell: the one at path when it looked, or the one there before
// another was renamed in or created at path. Whatever is at path is
// Unsure.
func (l *Ledger) Doubted(path string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tick()
	put(l, l.doubts, path, stamp{at: t, era: l.era})
}

// Arrived records that the file (dev, ino), or a directory when ino is
// 0, came to path now: created there or renamed in. It matters only
// where a write of unknown inode was seen at the path, or under it.
func (l *Ledger) Arrived(path string, dev, ino uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.unknownAt(path, ino == 0) {
		return
	}
	t := l.tick()
	id := inode{dev, ino}
	if ino == 0 {
		id = inode{}
	}
	put(l, l.arrivals, path, stamp{at: t, era: l.era})
	a := l.arrivals[path]
	a.id = id // the latest arrival's
	l.arrivals[path] = a
}

// unknownAt reports whether a write of unknown inode is kept at path or,
// for a directory, under it.
func (l *Ledger) unknownAt(path string, dir bool) bool {
	if !dir {
		s, ok := l.paths[path]
		return ok && s.id == (inode{})
	}
	for d := range l.unknown { // the directories of the writes of unknown inode: few
		if d == path || len(d) > len(path) && d[len(path)] == '/' && strings.HasPrefix(d, path) {
			return true
		}
	}
	return false
}

// arrivedSince reports whether the file id came to path, or a directory
// to a path above it, after at: a write seen at path then went to another
// file.
func (l *Ledger) arrivedSince(path string, id inode, at int64) bool {
	if a, ok := l.arrivals[path]; ok && a.id == id && a.at > at {
		return true
	}
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		if a, ok := l.arrivals[d]; ok && a.id == (inode{}) && a.at > at {
			return true
		}
		if d == "/" || d == "." {
			return false
		}
	}
}

// DirRenamed records that the directory at path was renamed away now.
func (l *Ledger) DirRenamed(path string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tick()
	put(l, l.dirs, path, stamp{at: t, era: l.era})
}

// DirMoved records that the directory renamed away from from is at to
// now. Writes seen under from, up to a minute after now, went to the
// files under to.
func (l *Ledger) DirMoved(from, to string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tick()
	if _, ok := l.moves[to]; !ok && len(l.moves) >= l.max {
		l.dropMoves(t)
	}
	l.moves[to] = move{from: from, at: t}
}

// dropMoves drops the expired moves and, if that is not enough, the older
// half. A write reported under a dropped move's old name may then be
// missed, so the newest dropped time becomes a doubt over every file.
func (l *Ledger) dropMoves(now int64) {
	times := make([]int64, 0, len(l.moves))
	for k, m := range l.moves {
		if now-m.at > window {
			delete(l.moves, k)
			continue
		}
		times = append(times, m.at)
	}
	if len(l.moves) < l.max {
		return
	}
	slices.Sort(times)
	cut := times[(len(times)-1)/2]
	for k, m := range l.moves {
		if m.at <= cut {
			delete(l.moves, k)
		}
	}
	l.lostAt = max(l.lostAt, cut+moveSlack)
}

// Lost records that writes under root may have gone unseen now.
func (l *Ledger) Lost(root string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tick()
	put(l, l.lost, filepath.Clean(root), stamp{at: t, era: l.era})
}

// Since answers whether the file at path, or inode (dev, ino) under any
// name, was written at or after sinceNs (Unix nanoseconds). An ino of 0
// skips the inode. A write seen at path counts unless it was seen with
// another inode than the one asked about: it went to another file then.
// A path under a moved directory is also asked about under the
// directory's old name.
func (l *Ledger) Since(path string, dev, ino uint64, sinceNs int64) Answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.read()
	era := int64(l.era)
	if sinceNs > now { // hashed before the last step back, maybe before this ledger
		era--
	}
	id := inode{dev, ino}
	if s, ok := l.inodes[id]; ok && ino != 0 && s.after(sinceNs, era) && now-s.at <= window {
		return Written
	}
	a := l.answer(path, id, sinceNs, era, now, math.MaxInt64, 0)
	if a == NotWritten && l.lostAt != 0 && l.lostAt >= sinceNs && now-l.lostAt <= window {
		a = Unsure
	}
	return a
}

// answer is Since by path: its entry, the doubts over it, and the same
// under the old names of the moved directories above it, for entries made
// up to until. hops counts the moves followed.
func (l *Ledger) answer(path string, id inode, since, era, now, until int64, hops int) Answer {
	live := func(s stamp, w int64) bool {
		return s.at != 0 && s.after(since, era) && s.at <= until && now-s.at <= w
	}
	a := NotWritten
	if s, ok := l.paths[path]; ok && live(s, window) {
		switch {
		case s.id == (inode{}) && id.ino != 0 && len(l.arrivals) > 0 && l.arrivedSince(path, id, s.at):
			a = Unsure // the write went to the file there before this one came
		case id.ino == 0 || s.id == (inode{}) || s.id == id:
			return Written
		case s.id == several:
			a = Unsure
		}
	}
	if live(l.unknown[filepath.Dir(path)], unknownWindow) || live(l.doubts[path], window) {
		a = Unsure
	}
	if len(l.dirs) == 0 && len(l.lost) == 0 && len(l.moves) == 0 {
		return a
	}
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		if live(l.dirs[d], window) || live(l.lost[d], window) {
			a = Unsure
		}
		if m, ok := l.moves[d]; ok && hops < maxHops && now-m.at <= window {
			old := filepath.Join(m.from, path[len(d):])
			a = max(a, l.answer(old, id, since, era, now, min(until, m.at+moveSlack), hops+1))
			if a == Written {
				return a
			}
		}
		if d == "/" || d == "." {
			return a
		}
	}
}

// Asker is a ledger as its readers declare it (*Ledger).
type Asker interface {
	Since(path string, dev, ino uint64, sinceNs int64) Answer
}

// SinceNames is Since for a file known by several names: the names the
// index records for inode (dev, ino). It is Written when a write was
// seen at any of them, else the strongest answer of the others.
func SinceNames(l Asker, names []string, dev, ino uint64, sinceNs int64) Answer {
	a := NotWritten
	for _, p := range names {
		if a = max(a, l.Since(p, dev, ino, sinceNs)); a == Written {
			break
		}
	}
	return a
}

// WrittenSince reports whether a write at or after sinceNs to the file at
// path, or to inode (dev, ino), may have happened: Since is not
// NotWritten. For consumers that only skip work on a doubt.
func (l *Ledger) WrittenSince(path string, dev, ino uint64, sinceNs int64) bool {
	return l.Since(path, dev, ino, sinceNs) != NotWritten
}

// tick returns the time now and drops expired entries every quarter
// window, so memory goes back down after a burst.
func (l *Ledger) tick() int64 {
	now := l.read()
	if now-l.prunedAt > window/4 {
		l.prunedAt = now
		expire(l.paths, now)
		expire(l.inodes, now)
		expire(l.dirs, now)
		expire(l.unknown, now)
		expire(l.doubts, now)
		expire(l.arrivals, now)
		expire(l.lost, now)
		for k, m := range l.moves {
			if now-m.at > window {
				delete(l.moves, k)
			}
		}
	}
	return now
}

// read reads the clock, counting a step back (# Clock steps).
func (l *Ledger) read() int64 {
	now := l.now()
	if now < l.last {
		l.era++
	}
	l.last = now
	return now
}

// put records s at k: the later of the two times, and the inode when
// both name the same one; unknown when either is, else several. A full
// map first drops its expired entries, then its older half; the newest
// dropped time becomes a doubt over every file.
func put[K comparable](l *Ledger, m map[K]stamp, k K, s stamp) {
	old, ok := m[k]
	if !ok && len(m) >= l.max {
		expire(m, s.at)
		if len(m) >= l.max {
			l.lostAt = max(l.lostAt, dropOlderHalf(m))
		}
	}
	if ok && old.id != s.id && s.id != (inode{}) {
		s.id = several
		if old.id == (inode{}) {
			s.id = inode{}
		}
	}
	m[k] = stamp{max(old.at, s.at), max(old.era, s.era), s.id}
}

// expire drops the entries older than the window.
func expire[K comparable](m map[K]stamp, now int64) {
	for k, s := range m {
		if now-s.at > window {
			delete(m, k)
		}
	}
}

// dropOlderHalf drops the older half of m, or more on ties, and returns
// the newest time dropped.
func dropOlderHalf[K comparable](m map[K]stamp) int64 {
	times := make([]int64, 0, len(m))
	for _, s := range m {
		times = append(times, s.at)
	}
	slices.Sort(times)
	cut := times[(len(times)-1)/2]
	for k, s := range m {
		if s.at <= cut {
			delete(m, k)
		}
	}
	return cut
}
