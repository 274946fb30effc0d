package watcher

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/roots"
)

// root watches one root directory; all its state belongs to the goroutine
// running run, except the published status (pub) and the Sync cookies
// (sync). Its parts keep their own fields: pendingSet (pending.go),
// denials (unreadable.go), overflows (overflow.go), mountFollow
// (mounts.go), cookies (sync.go), confirms (confirm.go) and published
// (status.go); root holds
// the watch tree and wires the parts to it.
type root struct {
	path string
	opts *Options
	log  *slog.Logger
	out  chan<- Event

	fsw       *fsnotify.Watcher
	dirs      map[string]map[string]struct{} // watched directory → names of its watched subdirectories
	dirInode  map[string]inodeID             // watched directory → its inode, where known
	inodeDir  map[inodeID]string             // the inverse
	left      map[inodeID]string             // watched directories renamed away, pending under their old name
	moves     []Event                        // Moved events to send at once
	unwatched map[string]int                 // top directories without a watch → directories under them
	nlinkFS   map[uint64]bool                // device → its link counts count subdirectories (leaf.go)
	pending   pendingSet                     // paths waiting to settle (pending.go)
	timer     *time.Timer
	armed     time.Time // when timer fires; zero if stopped

	denied denials // directories that cannot be read or watched (unreadable.go)

	ov         overflows // the overflow Rescan: scheduled, backed off (overflow.go)
	lastRescan time.Time
	rootGone   bool   // the root was removed; checked every DegradedRescan
	awayWhy    string // why the root is gone, for Status
	noInstance bool   // no inotify instance could be created; rescans only

	rootFS uint64      // the file system of the root, as last watched
	mounts mountFollow // the mount table, as last read (mounts.go)

	sync    cookies        // outstanding Sync cookies
	confirm confirms       // writes waiting for their inode's confirmation
	sent    *atomic.Uint64 // the Watcher's count of events sent

	setup *firstSetup // the first set-up of the watches, for WaitWatched

	inject      chan error   // test seam: errors as if from fsnotify
	watchLimit  atomic.Int64 // test seam: > 0 makes Add fail with ENOSPC beyond this many watches
	dropCookies atomic.Bool  // test seam: cookie events are lost, as in an overflow

	pub published // the status as last published, for Status
}

func newRoot(path string, opts *Options, out chan<- Event, sent *atomic.Uint64) *root {
	log := opts.Logger.With("root", path)
	r := &root{
		path:      path,
		sent:      sent,
		opts:      opts,
		log:       log,
		out:       out,
		dirs:      make(map[string]map[string]struct{}),
		dirInode:  make(map[string]inodeID),
		inodeDir:  make(map[inodeID]string),
		left:      make(map[inodeID]string),
		unwatched: make(map[string]int),
		nlinkFS:   make(map[uint64]bool),
		denied:    denials{why: make(map[string]string), log: log, retry: opts.DeniedRetry},
		pending:   newPendingSet(path, opts),
		inject:    make(chan error, 1),
		mounts:    mountFollow{changed: make(chan struct{}, 1)},
		ov:        overflows{backoff: opts.OverflowBackoff},
		setup:     newFirstSetup(),
		pub:       published{status: RootStatus{Root: path}},
	}
	r.confirm.init(opts.confirmWait)
	return r
}

func (r *root) run(ctx context.Context) error {
	defer r.setup.finish()
	early := r.opts.EarlyInitialRescan && !r.opts.NoInitialRescan
	if early && !r.emit(ctx, Event{Kind: Rescan, Path: r.path, Reason: ReasonInitial}) {
		return nil
	}
	if m, err := fsstat.Mounts(); err == nil {
		r.mounts.view, r.mounts.known = viewOf(realPath(r.path), m), true
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		// Out of inotify instances: the whole root is covered by rescans.
		r.log.Error("cannot create inotify instance; root is covered by periodic rescans",
			"err", err, "sysctl", "fs.inotify.max_user_instances")
		r.noInstance = true
		r.unwatched[r.path] = countDirs(r.path, r)
	} else {
		r.fsw = fsw
		defer fsw.Close()
		// The sync directory first: a cookie made during the set-up is
		// read after every event queued before it, so Sync is a barrier
		// then too.
		r.watchSyncDir()
		defer r.sync.set(false) // nobody waits for a root that stopped
		r.addTree(r.path)
	}
	r.setup.finish()
	r.timer = time.NewTimer(time.Hour)
	r.timer.Stop()
	safety := newTicker(r.opts.SafetyRescan, true)
	defer safety.Stop()
	degraded := newTicker(r.opts.DegradedRescan, false)
	defer degraded.Stop()
	deniedRetry := newTicker(r.opts.DeniedRetry, false)
	defer deniedRetry.Stop()
	r.publish()
	if !early && !r.opts.NoInitialRescan && !r.emit(ctx, Event{Kind: Rescan, Path: r.path, Reason: ReasonInitial}) {
		return nil
	}
	r.lastRescan = time.Now()

	var events <-chan fsnotify.Event
	var errs <-chan error
	if r.fsw != nil {
		events, errs = r.fsw.Events, r.fsw.Errors
	}
	for {
		var degradedC, deniedC <-chan time.Time
		if len(r.unwatched) > 0 || r.rootGone {
			degradedC = degraded.C()
		}
		if len(r.denied.why) > 0 {
			deniedC = deniedRetry.C()
		}
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			r.handle(ev)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			r.handleErr(err)
		case err := <-r.inject:
			r.handleErr(err)
		case <-r.mounts.changed:
			if !r.mountsChanged(ctx) {
				return nil
			}
		case <-r.timer.C:
			r.armed = time.Time{}
			// Events already queued happened before now: fold them in
			// first, or a file whose write is still in the queue would
			// be emitted now and again after the write is read.
			r.drain(events, errs)
			if !r.fire(ctx) {
				return nil
			}
		case <-safety.C():
			safety.Reset()
			if !r.rootGone && !r.rescanRoot(ctx, ReasonSafety) {
				return nil
			}
		case <-r.confirm.due():
			r.confirm.timerAt = time.Time{}
			r.askConfirm()
		case <-degradedC:
			degraded.Reset()
			if !r.retryUnwatched(ctx) {
				return nil
			}
		case <-deniedC:
			deniedRetry.Reset()
			if !r.retryDenied(ctx) {
				return nil
			}
		}
		if !r.flushMoves(ctx) {
			return nil
		}
		r.arm()
		r.publish()
		r.askConfirm()
	}
}

// drain handles the events that are already waiting, until none arrives
// for a moment; it stops after drainMax events or an eighth of the quiet
// period, so a storm cannot hold back what is due for long.
func (r *root) drain(events <-chan fsnotify.Event, errs <-chan error) {
	if events == nil {
		return
	}
	idle := time.NewTimer(drainIdle)
	defer idle.Stop()
	stop := time.Now().Add(r.opts.Quiet / 8)
	for n := 0; n < drainMax; n++ {
		if n%1024 == 1023 && time.Now().After(stop) {
			return
		}
		idle.Reset(drainIdle)
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			r.handle(ev)
		case err, ok := <-errs:
			if !ok {
				return
			}
			r.handleErr(err)
		case <-idle.C:
			return
		}
	}
}

const (
	drainIdle = 5 * time.Millisecond
	drainMax  = 1 << 16
)

// flushMoves sends the Moved events queued by handle.
func (r *root) flushMoves(ctx context.Context) bool {
	for len(r.moves) > 0 {
		ev := r.moves[0]
		r.moves = r.moves[1:]
		if !r.emit(ctx, ev) {
			return false
		}
	}
	r.moves = nil
	return true
}

// emit sends ev, or reports false when ctx ends first.
func (r *root) emit(ctx context.Context, ev Event) bool {
	r.sent.Add(1)
	select {
	case r.out <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *root) rel(p string) string { return roots.Rel(p, r.path) }

// handle folds one fsnotify event into the pending set and the watch tree.
func (r *root) handle(ev fsnotify.Event) {
	if r.opts.beforeEvent != nil {
		r.opts.beforeEvent(ev)
	}
	if r.syncEvent(ev) {
		return
	}
	p := ev.Name
	if !roots.Within(p, r.path) {
		return
	}
	_, watched := r.dirs[p]
	switch {
	case ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename):
		// The old name of a rename, or a deletion: whatever is there now
		// is decided when the path settles.
		if watched {
			r.dirLeft(p, ev.Has(fsnotify.Rename))
			return
		}
		if r.opts.Ignore.Match(r.rel(p), false) {
			return
		}
		r.pending.touch(p, false, r.dirs).forgetInode()
	case ev.Has(fsnotify.Create):
		fi, err := fsstat.Lstat(p)
		// A file or directory renamed over p, or made at it: a write at
		// p or under it stat'd since may have found it (confirm.go).
		if err == nil && !fi.IsDir() {
			r.confirm.doubt(p)
			r.opts.Writes.Arrived(p, fi.Dev, fi.Ino)
		} else {
			r.confirm.doubtUnder(p)
			r.opts.Writes.Arrived(p, 0, 0)
		}
		if err == nil && fi.IsDir() {
			if r.opts.Ignore.Match(r.rel(p), true) {
				return
			}
			if watched {
				// A new directory where a watched one was (renamed over
				// it): the old watches belong to the old inode.
				r.dropTree(p)
			}
			r.addTree(p) // watch before anyone reads it
			if !r.pairMove(p, inodeID{fi.Dev, fi.Ino}) {
				r.pending.touch(p, true, r.dirs).comeBack()
			}
			return
		}
		if !r.opts.Ignore.Match(r.rel(p), false) {
			it := r.pending.touch(p, false, r.dirs)
			it.forgetInode() // another file may be at p now
			it.comeBack()
		}
	default: // Write, Chmod
		if watched {
			return // a directory's own metadata
		}
		if !r.opts.Ignore.Match(r.rel(p), false) {
			it := r.pending.touch(p, false, r.dirs)
			if ev.Has(fsnotify.Write) {
				r.written(p, it)
			}
		}
	}
}

// dirLeft handles the watched directory p going away, renamed or deleted:
// its watches are dropped, and p waits to settle. A renamed directory
// whose inode is known waits in r.left for its new name.
func (r *root) dirLeft(p string, renamed bool) {
	id, known := r.dirInode[p]
	if renamed {
		r.opts.Writes.DirRenamed(p)
	}
	r.dropTree(p)
	it := r.pending.touch(p, true, r.dirs)
	if renamed && known && it != nil {
		r.left[id] = p
		it.left = id
	}
}

// pairMove pairs the directory p (inode id), just watched, with the old
// name it was renamed from, and queues the Moved event. The old name's
// item stays pending and emits nothing, unless something comes to that
// name again; an item of p is dropped, as the Moved covers it. It reports
// false, leaving p to settle as a new directory, when p has no watch or
// no watched directory of this root left with its inode.
func (r *root) pairMove(p string, id inodeID) bool {
	from, ok := r.left[id]
	if _, watched := r.dirs[p]; !ok || !watched || from == p {
		return false
	}
	delete(r.left, id)
	r.opts.Writes.DirMoved(from, p)
	old := r.pending.get(from)
	if old == nil {
		return false
	}
	old.moved, old.left = true, inodeID{}
	r.pending.drop(p)
	r.moves = append(r.moves, Event{Kind: Moved, From: from, Path: p})
	return true
}

func (r *root) handleErr(err error) {
	if errors.Is(err, fsnotify.ErrEventOverflow) {
		r.doubtAll() // the events that would doubt them may be lost
		r.overflow()
		// A cookie may be lost with the other events; the overflow
		// Rescan, pending from now on, covers whatever came before it.
		r.publish()
		r.sync.ackAll()
		return
	}
	r.log.Warn("inotify error", "err", err)
}

// fire emits the queued Moved events, then every pending path whose
// deadline has passed, and the overflow Rescan when it is due.
func (r *root) fire(ctx context.Context) bool {
	if !r.flushMoves(ctx) {
		return false
	}
	now := time.Now()
	if r.ov.take(now) && !r.rescanRoot(ctx, ReasonOverflow) {
		return false
	}
	for it := r.pending.popDue(now); it != nil; it = r.pending.popDue(now) {
		if it.left != (inodeID{}) && r.left[it.left] == it.path {
			delete(r.left, it.left) // unpaired: its Removed goes out
		}
		if it.moved {
			continue // its Moved went out
		}
		if r.pending.above(it.path) {
			// A directory above is itself waiting (deleted, renamed or
			// new): its Removed or Rescan covers this path; rm -rf of a
			// tree becomes one event.
			continue
		}
		if !r.settle(ctx, it) {
			return false
		}
	}
	return true
}

// settle decides what a quiet path has become and emits it.
func (r *root) settle(ctx context.Context, it *item) bool {
	p := it.path
	r.settling(p)
	_, watched := r.dirs[p]
	fi, err := fsstat.Lstat(p)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		if watched {
			r.dropTree(p)
		}
		if p == r.path {
			r.log.Error("root is gone; checking periodically for it to come back", "err", err)
			r.rootGone, r.awayWhy = true, "the root is gone, waiting for it"
		}
		return r.emit(ctx, Event{Kind: Removed, Path: p})
	case err != nil:
		// Cannot tell (e.g. EACCES on a parent): let the consumer look.
		return r.emit(ctx, Event{Kind: Changed, Path: p})
	case fi.IsDir():
		if r.opts.Ignore.Match(r.rel(p), true) {
			if watched {
				r.dropTree(p)
			}
			return r.emit(ctx, Event{Kind: Removed, Path: p})
		}
		if !watched {
			r.addTree(p)
		}
		return r.emit(ctx, Event{Kind: Rescan, Path: p, Reason: ReasonNewDir})
	default:
		if r.opts.Ignore.Match(r.rel(p), false) {
			return r.emit(ctx, Event{Kind: Removed, Path: p})
		}
		if it.wasDir && !r.emit(ctx, Event{Kind: Removed, Path: p}) {
			return false // a directory replaced by a file: its subtree is gone
		}
		return r.emit(ctx, Event{Kind: Changed, Path: p})
	}
}

// overflow schedules one Rescan of the root, no sooner than the backoff
// after the previous one; overflows while it waits join it.
func (r *root) overflow() {
	now := time.Now()
	r.opts.Writes.Lost(r.path) // with the events, writes under the root were lost
	due, scheduled := r.ov.note(now, r.opts)
	if scheduled {
		r.log.Warn("inotify queue overflow; rescanning root", "due", due, "backoff", r.ov.backoff,
			"overflows", r.ov.count)
	}
}

// rescanRoot re-establishes every watch of the root and emits its Rescan.
// Pending paths are dropped: the walk covers them.
func (r *root) rescanRoot(ctx context.Context, reason string) bool {
	if r.fsw != nil {
		r.dropTree(r.path)
		clear(r.unwatched)
		r.denied.clear()
		r.addTree(r.path)
	}
	now := time.Now()
	r.pending.reset()
	clear(r.left)
	r.lastRescan = now
	return r.emit(ctx, Event{Kind: Rescan, Path: r.path, Reason: reason})
}

// retryUnwatched tries again to watch every directory without a watch and
// emits a Rescan for each: their changes since the last one were not seen.
func (r *root) retryUnwatched(ctx context.Context) bool {
	if r.rootGone {
		if fi, err := fsstat.Lstat(r.path); err != nil || !fi.IsDir() {
			return true
		}
		r.rootGone, r.awayWhy = false, ""
		r.log.Info("root is back")
		return r.rescanRoot(ctx, ReasonNewDir)
	}
	tops := make([]string, 0, len(r.unwatched))
	for p := range r.unwatched {
		tops = append(tops, p)
	}
	clear(r.unwatched)
	for _, p := range tops {
		fi, err := fsstat.Lstat(p)
		if err != nil || !fi.IsDir() {
			continue
		}
		if r.noInstance {
			r.unwatched[p] = countDirs(p, r) // rescans only
		} else {
			r.addTree(p)
		}
		if p == r.path {
			r.lastRescan = time.Now()
		}
		if !r.emit(ctx, Event{Kind: Rescan, Path: p, Reason: ReasonDegraded}) {
			return false
		}
	}
	if len(r.unwatched) == 0 && len(tops) > 0 {
		r.log.Info("all directories watched again", "watches", len(r.dirs))
	}
	return true
}

// arm points the timer at the earliest deadline.
func (r *root) arm() {
	next := r.pending.next()
	if r.ov.pending && (next.IsZero() || r.ov.due.Before(next)) {
		next = r.ov.due
	}
	if next.Equal(r.armed) {
		return
	}
	r.timer.Stop()
	r.armed = next
	if !next.IsZero() {
		r.timer.Reset(max(time.Until(next), 0))
	}
}

func (r *root) publish() {
	unwatched := 0
	for _, n := range r.unwatched {
		unwatched += n
	}
	r.pub.mu.Lock()
	defer r.pub.mu.Unlock()
	s := &r.pub.status
	s.Watches = len(r.dirs)
	s.Unwatched = unwatched
	s.Degraded = len(r.unwatched) > 0
	s.RootMissing = r.rootGone
	s.Away = r.awayWhy
	s.NoInstance = r.noInstance
	s.WatchesNeeded = s.Watches + unwatched
	s.Unreadable, s.UnreadableDirs = len(r.denied.why), r.denied.problems()
	s.Pending = r.pending.len() + len(r.moves)
	if r.ov.pending {
		s.Pending++ // the overflow Rescan of the root
	}
	s.Overflows = r.ov.count
	s.LastOverflow = r.ov.last
	s.LastRescan = r.lastRescan
}

// maxUserWatches reads fs.inotify.max_user_watches; 0 if unknown.
func maxUserWatches() int { return procInt("max_user_watches") }

// procInt reads /proc/sys/fs/inotify/name; 0 if unknown.
func procInt(name string) int {
	b, err := os.ReadFile("/proc/sys/fs/inotify/" + name)
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return n
}

// sysctlFor is the command that raises the limit by what is missing plus
// 10 % headroom, rounded up to a multiple of 1024.
func sysctlFor(current, missing int) string {
	n := current + missing + missing/10 + 1
	n = (n + 1023) / 1024 * 1024
	return "sysctl fs.inotify.max_user_watches=" + strconv.Itoa(n)
}

// ticker is a jittered periodic timer that can be disabled (d < 0).
type ticker struct {
	d      time.Duration
	jitter bool
	t      *time.Timer
}

func newTicker(d time.Duration, jitter bool) *ticker {
	tk := &ticker{d: d, jitter: jitter}
	if d > 0 {
		tk.t = time.NewTimer(tk.next())
	}
	return tk
}

func (tk *ticker) next() time.Duration {
	if !tk.jitter {
		return tk.d
	}
	return time.Duration(float64(tk.d) * (0.9 + 0.2*rand.Float64()))
}

func (tk *ticker) C() <-chan time.Time {
	if tk.t == nil {
		return nil
	}
	return tk.t.C
}

func (tk *ticker) Reset() {
	if tk.t != nil {
		tk.t.Reset(tk.next())
	}
}

func (tk *ticker) Stop() {
	if tk.t != nil {
		tk.t.Stop()
	}
}
