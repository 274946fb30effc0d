// Package watcher turns inotify events under a set of root directories into a
// short stream of settled facts: a file changed, a path is gone, or a
// directory must be walked again.
//
// # Basics
//
// fsnotify watches single directories; a [Watcher] keeps one watch per
// directory under each root (one inotify instance per root), adds the watch
// of a new directory before anything reads that directory, and drops the
// watches of a subtree that was deleted or moved away. Ignored directories
// (Options.Ignore, matched relative to the root) get no watch. The kernel
// keeps one watch per inode, so the watcher knows each watched directory's
// inode: a directory met under a new name before the event for its old name
// is read takes the old name's place at once, and a directory mounted twice
// inside a root (a bind mount) is watched once, under the name met first;
// changes under the other name are then reported under that one. A
// directory whose link count shows no subdirectory is watched without being
// read, where link counts count subdirectories (ext4, XFS, tmpfs).
//
// Events are aggregated per path: a path is emitted only after it has been
// quiet for Options.Quiet (default 1 s), or after Options.MaxDelay (default
// 1 min) since its first event if it never goes quiet, so a file written
// slowly is emitted once, after the writer is done, and a file rewritten
// while it waits is emitted once. Deadlines live in one heap under one
// timer; the pending set holds only paths that are changing.
//
// When a path settles the watcher lstat's it and emits:
//
//   - [Changed]: something that is not a directory exists at Path. Usually a
//     regular file to hash; the consumer lstat's it anyway and drops its
//     record when it is not a regular file (a symlink, a FIFO).
//   - [Removed]: nothing exists at Path; if it was a directory, everything
//     under it is gone too.
//   - [Rescan]: the truth about Path and everything under it may have
//     changed: walk it again, and records at or under Path that the walk
//     does not find are gone. Reason says why: a new or moved-in directory,
//     the watcher's start, an inotify queue overflow, a periodic safety
//     rescan, or degraded mode covering a directory without a watch.
//
// A Rescan is emitted only after the watches for the directory are in place,
// so every change after the Rescan is seen either by the walk or as a later
// event. The one exception is the initial Rescan with
// Options.EarlyInitialRescan: it comes before the set-up, and the walk
// must call Watcher.WaitWatched before it opens each directory, the root
// included; a change in a directory after that is then an event. Consumers
// must treat events as idempotent hints: the same file may be reported by
// a Changed and by a Rescan walk.
//
// Options.Writes is told of every write the watcher reads (by the inode a
// stat of its path gives, once no rename can have come between the write
// and the stat, else as a doubt: confirm.go), of every watched directory
// renamed away, and of lost events. A consumer
// keeps them to know of writes that no stat field shows. While a root sets
// up its watches it reads no event, so Writes, Status and the Events of
// that time lag until the set-up is over; Watcher.CatchingUp says when
// they may (and Sync waits it out).
//
// # Moved directories
//
// A watched directory renamed within its root is one [Moved] event: the
// directory at From is now at Path. Walk Path as for a Rescan, since files
// may have changed in the gap; records under Path that the walk does not
// find are gone, and so are records left under From. The watcher pairs the
// two names by the directory's inode and sends the Moved as soon as it
// reads the new name, once its watches are in place: before any event
// about what happens to either name afterwards. After a chain of renames
// read together, From is the first name and Path the last. A rename the watcher cannot pair
// keeps the two events of the general rule, Removed for the old name and
// a Rescan for the new: a directory moved in from outside the root or out
// of it, across roots, or gone again before its new name could be watched.
//
// Run starts with one Rescan of each root (ReasonInitial) once the root's
// watches are in place (or before, with Options.EarlyInitialRescan), so a
// consumer that walks on Rescan needs no initial walk of its own
// (Options.NoInitialRescan turns it off). Paths under a
// directory that is itself waiting to settle (new, deleted or renamed) are
// folded into that directory's Rescan or Removed instead of being emitted one
// by one (rm -rf of a tree is one Removed), and a Rescan of a whole root
// (overflow, safety) replaces every path then pending. A directory replaced
// by a file gives Removed (its subtree) and then Changed for the same path. When walking a
// Rescan'd directory with the same ignore patterns, match them relative to
// the root (walker.Options.IgnoreRoot).
//
// The watcher follows the mount table (mounts.go): a root whose file
// system is unmounted waits, and says so in Status; when the mount of a
// root, or of a directory under it, changes, its watches are set up again
// and it is rescanned (ReasonMount).
//
// If a root itself disappears, the watcher emits Removed for it, checks
// every Options.DegradedRescan whether it is back, and then watches it again
// and emits a Rescan of it.
//
// # Ordering
//
// Events for one root come from one goroutine in the order they settle;
// roots are independent. An unpaired rename's Removed and Rescan settle at
// about the same time, in either order.
//
// # Sync
//
// The kernel queues inotify events and the watcher reads them a little
// later, so right after a change the watcher may not know of it yet.
// [Watcher.Sync] is a barrier: when it returns, every event queued before
// the call has been read, so the change is in the pending set or sent.
// Like Watchman's sync cookies, it creates a file in a private directory
// (Options.SyncDir, never in a root) that every root's inotify instance
// also watches, and waits until each root has read that file's event:
// one instance delivers its events in order. Cookie events never become
// Events and the directory's watch is not counted in Status. After an
// overflow a root acknowledges every cookie at once (its cookie may be
// lost): the overflow Rescan it then holds pending covers the rest. Roots
// that cannot see cookies (no inotify instance, no watch on SyncDir) are
// not waited for; without SyncDir, Sync returns at once.
//
// # Overflow and limits
//
// An inotify queue overflow (fsnotify.ErrEventOverflow) means events were
// lost: the root's watches are re-established and one Rescan of the root is
// emitted, no sooner than Options.OverflowBackoff after the previous one;
// the backoff doubles while overflows keep coming (up to
// Options.MaxOverflowBackoff), so a storm cannot cause endless recrawls.
//
// When the watch limit is reached (ENOSPC or EMFILE from inotify), the
// watcher goes on in degraded mode: everything already watched keeps
// working; directories without a watch are covered by a Rescan every
// Options.DegradedRescan, and each time it tries again to add their watches.
// The log and [Watcher.Status] give the number of watches needed and the
// exact sysctl that raises fs.inotify.max_user_watches.
//
// A directory that exists but cannot be read or watched (permission
// denied, say), the root included, gets no watch and its subtree is not
// known. Status lists it with the error. The watcher tries it again every
// Options.DeniedRetry and on any event about it, and emits a Rescan of it
// once it can read it.
//
// Every root also gets a safety Rescan every Options.SafetyRescan (jittered
// by ±10 %), which costs a stat walk when nothing changed.
package watcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sync/errgroup"

	"github.com/annexd/annexd/internal/roots"
)

// Errors returned by New and Run.
var (
	ErrRoot    = errors.New("watcher: bad root")
	ErrStarted = errors.New("watcher: Run called twice")
)

// Kind says what an Event means; see the package documentation.
type Kind uint8

// Event kinds.
const (
	Changed Kind = iota + 1
	Removed
	Rescan
	Moved
)

func (k Kind) String() string {
	switch k {
	case Changed:
		return "changed"
	case Removed:
		return "removed"
	case Rescan:
		return "rescan"
	case Moved:
		return "moved"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Reasons carried by Rescan events (Changed and Removed carry "").
const (
	ReasonInitial  = "initial"   // the watcher started (its watches are in place, or being set up with EarlyInitialRescan)
	ReasonNewDir   = "directory" // a directory appeared (created or moved in)
	ReasonOverflow = "overflow"  // the inotify queue overflowed: events were lost
	ReasonSafety   = "safety"    // periodic safety rescan
	ReasonDegraded = "degraded"  // periodic rescan of a directory without a watch
)

// Event is one settled fact about a path under a root; see the package
// documentation for what each Kind means.
type Event struct {
	Kind   Kind
	Path   string // absolute, bytes as on disk
	Reason string // for Rescan: one of the Reason constants
	From   string // for Moved: the directory's old path
}

// WriteRecorder keeps what the watcher saw written, for a consumer that
// must know of writes no stat field shows. The watcher calls it when it
// reads an event, from one goroutine per root.
type WriteRecorder interface {
	// Written: the file at path, inode (dev, ino), was written; ino is 0
	// when the watcher could not stat it.
	Written(path string, dev, ino uint64)
	// Doubted: a write at path went to a file the watcher cannot tell:
	// the one at path now, or the one there before another came to path
	// between the write and the watcher's stat (confirm.go).
	Doubted(path string)
	// Arrived: the file (dev, ino), or a directory when ino is 0, came
	// to path: created there or renamed in. A write of unknown inode seen
	// at path before went to another file.
	Arrived(path string, dev, ino uint64)
	// DirRenamed: the watched directory at path was renamed away; a write
	// under it may reach no watch until its new name is watched.
	DirRenamed(path string)
	// DirMoved: the directory renamed away from from is now at to. A write
	// that followed the rename may have been reported under from.
	DirMoved(from, to string)
	// Lost: events of the root at root were lost, so any file under it
	// may have been written unseen.
	Lost(root string)
}

type noRecorder struct{}

func (noRecorder) Written(string, uint64, uint64) {}
func (noRecorder) Doubted(string)                 {}
func (noRecorder) Arrived(string, uint64, uint64) {}
func (noRecorder) DirRenamed(string)              {}
func (noRecorder) DirMoved(string, string)        {}
func (noRecorder) Lost(string)                    {}

// Matcher tells which paths, relative to a root, are left out
// (internal/ignore's gitignore-style patterns, say).
type Matcher interface {
	Match(rel string, isDir bool) bool
}

// matchNothing is the Matcher of a Watcher without Options.Ignore.
type matchNothing struct{}

func (matchNothing) Match(string, bool) bool { return false }

// Options tune a Watcher. The zero value works; defaults are filled by New.
type Options struct {
	Quiet              time.Duration // a path is emitted after this long without events; default 1 s
	MaxDelay           time.Duration // ... or this long after its first event; default 1 min
	SafetyRescan       time.Duration // periodic Rescan of every root, jittered ±10 %; default 6 h; <0 disables
	DegradedRescan     time.Duration // Rescan period for directories without a watch; default 10 min
	DeniedRetry        time.Duration // retry period for directories that cannot be read; default 10 s
	OverflowBackoff    time.Duration // minimum gap between overflow Rescans of a root; default 10 s
	MaxOverflowBackoff time.Duration // the backoff doubles up to this; default 10 min
	NoInitialRescan    bool          // do not emit a Rescan of each root at start
	OneFileSystem      bool          // watch no directory on another file system than its root's, as find -xdev
	Ignore             Matcher       // paths left out, relative to the root; nil leaves out nothing
	Logger             *slog.Logger
	Writes             WriteRecorder // told of every write seen; nil tells nobody

	// SyncDir is a private, existing directory for Sync's cookie files,
	// outside the roots or inside one (it then gets no watch, events or
	// Rescans of its own); "" makes Sync a no-op.
	SyncDir string
	// EarlyInitialRescan emits each root's initial Rescan before its
	// watches are set up rather than after, so the consumer's walk runs
	// beside the set-up. The walk must then call WaitWatched before it
	// reads each directory (walker.Options.BeforeDir).
	EarlyInitialRescan bool

	beforeWatch func(dir string)        // test seam: called before each watch of a set-up is added
	beforeEvent func(ev fsnotify.Event) // test seam: called before each event is handled
	confirmWait time.Duration           // test seam: the wait for a confirmation cookie; 0: confirmWait
}

func (o *Options) fill() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Quiet, time.Second)
	def(&o.MaxDelay, time.Minute)
	def(&o.SafetyRescan, 6*time.Hour)
	def(&o.DegradedRescan, 10*time.Minute)
	def(&o.DeniedRetry, 10*time.Second)
	def(&o.OverflowBackoff, 10*time.Second)
	def(&o.MaxOverflowBackoff, 10*time.Minute)
	if o.MaxDelay < o.Quiet {
		o.MaxDelay = o.Quiet
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Ignore == nil {
		o.Ignore = matchNothing{}
	}
	if o.Writes == nil {
		o.Writes = noRecorder{}
	}
}

// Watcher watches a set of roots. Create it with New, then call Run once and
// read Events until it is closed.
type Watcher struct {
	opts     Options
	roots    []*root
	events   chan Event
	started  sync.Once
	sent     atomic.Uint64 // events sent (or being sent) on events
	cookies  atomic.Uint64 // names of Sync cookies
	caughtUp atomic.Bool   // see CatchingUp
}

// New checks the roots (absolute or not, each must be an existing
// directory; no root may contain another, also through a symlink) and
// returns a Watcher. Each root is watched as given, made absolute and
// clean: events under a symlinked root carry that spelling. Nothing is
// watched until Run.
func New(paths []string, opts Options) (*Watcher, error) {
	opts.fill()
	w := &Watcher{opts: opts, events: make(chan Event, 256)}
	set, err := roots.Resolve(paths)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRoot, err)
	}
	var given []string
	for _, r := range set.Roots() {
		given = append(given, r.Given)
	}
	if err := w.checkSyncDir(given); err != nil {
		return nil, err
	}
	for _, g := range given {
		w.roots = append(w.roots, newRoot(g, &w.opts, w.events, &w.sent))
	}
	return w, nil
}

// Roots returns the roots as watched: absolute and clean. Event paths start
// with one of them.
func (w *Watcher) Roots() []string {
	roots := make([]string, len(w.roots))
	for i, r := range w.roots {
		roots[i] = r.path
	}
	return roots
}

// checkSyncDir makes Options.SyncDir absolute and refuses one at or above
// a root.
func (w *Watcher) checkSyncDir(paths []string) error {
	if w.opts.SyncDir == "" {
		return nil
	}
	abs, err := filepath.Abs(w.opts.SyncDir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSync, err)
	}
	for _, r := range paths {
		if roots.Within(r, abs) {
			return fmt.Errorf("%w: directory %s holds the root %s", ErrSync, abs, r)
		}
	}
	w.opts.SyncDir = abs
	return nil
}

// Emitted returns the number of events sent, or being sent, on Events so
// far. A consumer that counts the events it has acted on can tell from it
// whether any is still on its way.
func (w *Watcher) Emitted() uint64 { return w.sent.Load() }

// Events returns the channel of settled events. It is closed when Run
// returns. A consumer that stops reading stalls the watcher; the kernel
// then queues events until its queue overflows, which leads to a Rescan.
func (w *Watcher) Events() <-chan Event { return w.events }

// Run watches until ctx is cancelled, then releases every watch, closes
// Events and returns nil; it returns an error only if it cannot start.
func (w *Watcher) Run(ctx context.Context) error {
	first := false
	w.started.Do(func() { first = true })
	if !first {
		return ErrStarted
	}
	defer close(w.events)
	g, ctx := errgroup.WithContext(ctx)
	for _, r := range w.roots {
		g.Go(func() error { return r.run(ctx) })
	}
	start := time.Now()
	g.Go(func() error { w.catchUp(ctx, start); return nil })
	g.Go(func() error { return w.watchMounts(ctx) })
	return g.Wait()
}

// CatchingUp reports whether writes may have happened that Options.Writes
// was not told of yet because the watcher has not read their events: from
// before Run until every root's first set-up of its watches is over and
// the events queued meanwhile are read (a Sync). A consumer that trusts
// "no write seen" (a renamed file taking over its old record) must not
// trust it then. Where no Sync can tell (no Options.SyncDir, a root whose
// watch on it failed), it stays true.
func (w *Watcher) CatchingUp() bool { return !w.caughtUp.Load() }

// catchUp waits for the roots' first set-ups, then for the events queued
// meanwhile to be read, and ends CatchingUp.
func (w *Watcher) catchUp(ctx context.Context, start time.Time) {
	for _, r := range w.roots {
		select {
		case <-r.setup.overCh:
		case <-ctx.Done():
			return
		}
	}
	err := w.Sync(ctx)
	if ctx.Err() != nil {
		return
	}
	for _, r := range w.roots {
		if err == nil && !r.noInstance && !r.sync.isOn() {
			err = fmt.Errorf("%w: root %s does not watch the sync directory", ErrSync, r.path)
		}
	}
	if w.opts.SyncDir == "" {
		err = fmt.Errorf("%w: no sync directory", ErrSync)
	}
	if err != nil {
		w.opts.Logger.Info("cannot tell when the events queued while the watches were set up are read; renamed files are hashed rather than trusted", "err", err)
		return
	}
	w.caughtUp.Store(true)
	w.opts.Logger.Debug("watches set up and the events queued meanwhile read", "took", time.Since(start).Round(time.Millisecond))
}

// WaitWatched returns once the first set-up of the watches has tried to
// watch dir, so that a change in dir after that is an event: dir has its
// watch, or it has none for a reason Status gives once the set-up is over
// (the limit, an unreadable directory), or it is gone, or it is a second
// name of a directory watched under its first (a bind mount). A directory
// the set-up does not try (under one without a watch, made after its
// parent was read, ignored, or outside every root as spelled here) waits
// for the whole set-up; Options.SyncDir and what is under it never wait.
// Once the set-up is over, or the watcher stopped, it returns at once;
// before Run, it waits. It returns ctx.Err() when ctx ends first. It is
// safe for concurrent use.
func (w *Watcher) WaitWatched(ctx context.Context, dir string) error {
	if w.opts.SyncDir != "" && roots.Within(dir, w.opts.SyncDir) {
		return nil // never part of a root's tree: nothing to wait for
	}
	for _, r := range w.roots {
		if roots.Within(dir, r.path) {
			return r.setup.wait(ctx, dir)
		}
	}
	for _, r := range w.roots {
		select {
		case <-r.setup.overCh:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Status describes every root's watches.
type Status struct {
	Roots []RootStatus
}

// RootStatus describes the watches of one root.
type RootStatus struct {
	Root           string
	Watches        int       // directories with a watch
	Unwatched      int       // directories without one (degraded mode), as last counted
	Degraded       bool      // some directories have no watch (limit reached)
	NoInstance     bool      // no inotify instance (fs.inotify.max_user_instances reached): rescans only
	RootMissing    bool      // the root was removed, or its file system unmounted; checked every DegradedRescan and at each mount
	Away           string    // why the root's file system is not there, e.g. "file system not mounted, waiting"
	WatchesNeeded  int       // Watches + Unwatched
	MaxUserWatches int       // fs.inotify.max_user_watches now; 0 if unknown
	Sysctl         string    // when degraded: the exact command that raises the limit enough
	Pending        int       // paths waiting to settle, and a scheduled overflow Rescan
	Overflows      int       // inotify queue overflows since start
	LastOverflow   time.Time // zero if none
	LastRescan     time.Time // last Rescan of the whole root; zero if none

	// Unreadable counts the directories that cannot be read or watched
	// (their subtrees are unknown); UnreadableDirs lists the first of
	// them in path order, at most 10, with why.
	Unreadable     int
	UnreadableDirs []DirProblem
}

// Status returns a snapshot of every root's state.
func (w *Watcher) Status() Status {
	var s Status
	for _, r := range w.roots {
		s.Roots = append(s.Roots, r.pub.snapshot())
	}
	return s
}

// Pending counts the paths every root holds back to settle, and the
// overflow rescans scheduled: RootStatus.Pending summed, without the
// reads of /proc that Status makes for its limits.
func (w *Watcher) Pending() int {
	n := 0
	for _, r := range w.roots {
		n += r.pub.pending()
	}
	return n
}

// injectOverflow makes the root at path behave as if its inotify queue
// overflowed (a test seam).
func (w *Watcher) injectOverflow(path string) bool {
	for _, r := range w.roots {
		if r.path == path {
			r.inject <- fsnotify.ErrEventOverflow // Run reads it
			return true
		}
	}
	return false
}

// setWatchLimit makes each root fail to add more than n watches with
// ENOSPC, as the kernel does at fs.inotify.max_user_watches; 0 lifts the
// limit (a test seam).
func (w *Watcher) setWatchLimit(n int) {
	for _, r := range w.roots {
		r.watchLimit.Store(int64(n))
	}
}
