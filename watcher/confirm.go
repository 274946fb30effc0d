package watcher

import (
	"cmp"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Which file a write went to.
//
// inotify names a write by the path written alone, and the watcher stats
// that path for the inode when it reads the event. A rename or removal
// at the path, or above it, between the write and the stat makes the stat
// name another file: the one renamed in (names swapped while a file is
// written, say). Told to Options.Writes, that write would pass for an edit
// of a file nobody wrote, and a rotten file swapped in would have its
// rot taken for the truth.
//
// So the inode a stat gives is not told until the watcher has read a
// cookie it made after the stat: every event queued before the stat has
// been read by then. A file or directory created or renamed in at the
// path, or at a directory above it, read before the cookie makes the
// write Doubted instead: the file at the path is unsure, not written. A
// rename or removal alone does not: a stat after it fails, and the write
// stays one of unknown inode at the path, which the ledger counts for the
// file moved from the path (and, under a moved directory, at its new
// name). An item's inode,
// once confirmed, is told at once for its further writes, until an event
// at its path makes it stat the path again.
//
// A Sync's cookie confirms the writes stat'd before Sync asked for it,
// and is acknowledged only once a cookie of the root's own has told the
// later ones: Options.Writes knows of every write read before Sync
// returns. A path that settles while its write waits is Doubted first, so
// the consumer of the Changed event never finds the write untold.
//
// Without the sync directory watched, no cookie can confirm a stat: it is
// told as it is. A cookie not made, or not read within confirmWait (lost
// in an overflow), leaves the writes waiting Doubted.

const (
	// confirmWait bounds the wait for a confirmation cookie.
	confirmWait = 10 * time.Second
	// maxCookies bounds the cookies in flight: a write waits for a
	// cookie made after its stat, and a storm of writes makes few.
	maxCookies = 4
)

// rootIDs numbers the roots of the process, for their cookies' names.
var rootIDs atomic.Uint64

// unconfirmed is a write waiting for its cookie.
type unconfirmed struct {
	id    inodeID // from the stat; zero when the stat failed
	doubt bool    // something came to the path, or above it, after the write
	told  bool    // already Doubted: its path settled first
	stat  uint64  // the number of its latest stat (confirms.stats)
	first uint64  // the number of its first: the oldest write it holds
}

// heldSync is a Sync's cookie read while writes stat'd after it was
// asked for still wait: acknowledged once the writes stat'd up to need
// are told.
type heldSync struct {
	name string
	need uint64
}

// flying is a confirmation cookie made and not yet read.
type flying struct {
	n     uint64    // its number, in its name
	stats uint64    // the write stats made before it
	at    time.Time // when it was made
}

// confirms are a root's writes waiting for a cookie, by path.
type confirms struct {
	prefix  string // the root's cookie names: prefix + number
	waiting map[string]*unconfirmed
	out     []flying      // oldest first
	next    uint64        // the last cookie number made
	covered uint64        // the write stats made before the last cookie
	held    []heldSync    // Sync cookies read, acknowledged once their writes are told
	stats   atomic.Uint64 // write stats made; read by Sync, for its cookie
	wait    time.Duration // confirmWait, or the test's
	timer   *time.Timer   // fires when the oldest cookie in flight is overdue
	timerAt time.Time     // when timer fires; zero when stopped
}

// due fires when the oldest cookie in flight is overdue; nil when none
// is in flight.
func (cs *confirms) due() <-chan time.Time {
	if cs.timerAt.IsZero() {
		return nil
	}
	return cs.timer.C
}

// arm sets the timer for the oldest cookie in flight, or stops it.
func (cs *confirms) arm() {
	if len(cs.out) == 0 {
		if !cs.timerAt.IsZero() {
			cs.timer.Stop()
			cs.timerAt = time.Time{}
		}
		return
	}
	at := cs.out[0].at.Add(cs.wait)
	switch {
	case cs.timer == nil:
		cs.timer = time.NewTimer(time.Until(at))
	case at.Equal(cs.timerAt):
		return
	default:
		cs.timer.Reset(time.Until(at))
	}
	cs.timerAt = at
}

func (cs *confirms) init(wait time.Duration) {
	cs.wait = cmp.Or(wait, confirmWait)
	cs.prefix = cookiePrefix + "w" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(rootIDs.Add(1), 10) + "-"
	cs.waiting = make(map[string]*unconfirmed)
}

// add notes a write to p, attributed to id by a stat just made.
func (cs *confirms) add(p string, id inodeID) {
	n := cs.stats.Add(1)
	u := cs.waiting[p]
	if u == nil {
		cs.waiting[p] = &unconfirmed{id: id, stat: n, first: n}
		return
	}
	if u.id != id {
		u.doubt = true
	}
	u.stat = n // a cookie made before this stat no longer confirms it
}

// doubt marks the write waiting at p.
func (cs *confirms) doubt(p string) {
	if u := cs.waiting[p]; u != nil {
		u.doubt = true
	}
}

// doubtUnder marks the writes waiting at dir and under it.
func (cs *confirms) doubtUnder(dir string) {
	for p, u := range cs.waiting {
		if p == dir || strings.HasPrefix(p, dir) && (strings.HasSuffix(dir, "/") || p[len(dir)] == '/') {
			u.doubt = true
		}
	}
}

// tell tells Options.Writes of the write at p: written by its inode, or
// Doubted. A write of unknown inode that nothing doubts stays a write
// of unknown inode at p, as before the cookie.
func (r *root) tell(p string, u *unconfirmed) {
	switch {
	case u.doubt:
		if !u.told {
			r.opts.Writes.Doubted(p)
		}
	default:
		r.opts.Writes.Written(p, u.id.dev, u.id.ino)
		if it := r.pending.get(p); it != nil && it.inode == u.id && u.id != (inodeID{}) {
			it.sure = true
		}
	}
}

// written tells Options.Writes of a write to p, with the inode kept on
// p's pending item or, when it has none yet, a fresh lstat's; one not yet
// confirmed waits for a cookie.
func (r *root) written(p string, it *item) {
	var id inodeID
	if it != nil {
		id = it.inode
	}
	if id != (inodeID{}) && it.sure {
		r.opts.Writes.Written(p, id.dev, id.ino)
		return
	}
	if id == (inodeID{}) {
		id = inodeOf(p)
		if it != nil {
			it.inode = id
		}
	}
	if !r.sync.isOn() {
		// No cookie can confirm it: as good as the stat.
		r.opts.Writes.Written(p, id.dev, id.ino)
		return
	}
	r.confirm.add(p, id)
	r.askConfirm()
}

// askConfirm makes a cookie for the writes stat'd since the last one,
// unless maxCookies are in flight; a cookie in flight too long, or one
// that cannot be made, leaves the waiting writes Doubted.
func (r *root) askConfirm() {
	cs := &r.confirm
	defer cs.arm()
	if len(cs.out) > 0 && time.Since(cs.out[0].at) >= cs.wait {
		r.log.Warn("a write's confirmation cookie did not come back; its file is unsure", "waited", cs.wait)
		r.doubtAll()
		return
	}
	stats := cs.stats.Load()
	if len(cs.waiting) == 0 || stats == cs.covered || len(cs.out) >= maxCookies {
		return
	}
	cs.next++
	if err := makeCookie(filepath.Join(r.opts.SyncDir, cs.prefix+strconv.FormatUint(cs.next, 10))); err != nil {
		r.log.Warn("cannot make a write's confirmation cookie; its file is unsure", "err", err)
		r.doubtAll()
		return
	}
	cs.out = append(cs.out, flying{n: cs.next, stats: stats, at: time.Now()})
	cs.covered = stats
}

// confirmed handles the cookie called name, if it is this root's: the
// writes whose latest stat came before it are told.
func (r *root) confirmed(name string) bool {
	cs := &r.confirm
	num, ok := strings.CutPrefix(name, cs.prefix)
	if !ok {
		return false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	i := slices.IndexFunc(cs.out, func(f flying) bool { return f.n == n })
	if err != nil || i < 0 {
		return true // a stale cookie of this root: nothing waits for it
	}
	stats := cs.out[i].stats
	cs.out = cs.out[i+1:] // cookies come in order: older ones are lost
	for p, u := range cs.waiting {
		if u.stat <= stats {
			r.tell(p, u)
			delete(cs.waiting, p)
		}
	}
	r.release()
	r.askConfirm() // for the writes that came after it
	return true
}

// holdSync answers a Sync's cookie called name: the writes whose latest
// stat came before the cookie was made (stats) are told, as by a cookie
// of the root's own. It reports true when later writes still wait: the
// cookie is acknowledged once a cookie of the root's own has told them,
// so Options.Writes knows of every write read before Sync returns.
func (r *root) holdSync(name string, stats uint64) bool {
	cs := &r.confirm
	for p, u := range cs.waiting {
		if u.stat <= stats {
			r.tell(p, u)
			delete(cs.waiting, p)
		}
	}
	r.release() // a Sync held before may have waited for these
	if len(cs.waiting) == 0 {
		return false
	}
	cs.held = append(cs.held, heldSync{name: name, need: cs.stats.Load()})
	r.askConfirm()
	return true
}

// release acknowledges the Sync cookies held whose writes are all told:
// no write waiting was stat'd up to their need.
func (r *root) release() {
	cs := &r.confirm
	if len(cs.held) == 0 {
		return
	}
	oldest := uint64(math.MaxUint64)
	for _, u := range cs.waiting {
		oldest = min(oldest, u.first)
	}
	r.publish()
	cs.held = slices.DeleteFunc(cs.held, func(h heldSync) bool {
		if h.need < oldest {
			r.sync.ack(h.name)
			return true
		}
		return false
	})
}

// doubtAll tells every waiting write as Doubted: its cookie will not
// come (an overflow, the sync directory gone, a cookie lost).
func (r *root) doubtAll() {
	for p, u := range r.confirm.waiting {
		u.doubt = true
		r.tell(p, u)
	}
	clear(r.confirm.waiting)
	r.confirm.out = nil
	r.confirm.covered = r.confirm.stats.Load()
	r.release()
}

// settling tells the write waiting at p as Doubted before p's Changed
// goes out; the cookie, when it comes, may still tell it written.
func (r *root) settling(p string) {
	if u := r.confirm.waiting[p]; u != nil && !u.told {
		r.opts.Writes.Doubted(p)
		u.told = true
	}
}
