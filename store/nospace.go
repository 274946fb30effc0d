package store

import (
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Backlog is what the writer holds because the index's file system is
// full: the group it could not commit and the changes queued behind it.
// The writer tries the group again as soon as the file system has more
// room, and at least every holdRetryMax; it takes no other change
// meanwhile, so whoever submits waits (back-pressure).
type Backlog struct {
	Changes int       // changes waiting; 0 when the writer holds none
	Since   time.Time // when the writer first could not commit them
	Err     error     // why: an ErrNoSpace
}

// How the writer retries a group the file system refused.
const (
	holdPoll     = time.Second      // how often it looks at the free space
	holdRetryMin = time.Second      // its first retry without more room
	holdRetryMax = 30 * time.Second // its longest wait between retries
	holdQuiet    = 5 * time.Minute  // a hold starting sooner after the last one logged is not logged
)

// hold is the writer's wait for space: its state while the file system
// is full, and what it needs to know to wait.
type hold struct {
	file    string // the index's path
	logger  *slog.Logger
	closing <-chan struct{} // closed by Close
	stop    <-chan struct{} // Run's ctx.Done, set by Run
	queued  func() int      // changes queued behind the writer
	inHand  atomic.Int64    // changes the writer took and has not answered yet

	mu       sync.Mutex
	since    time.Time
	err      error
	retries  int
	logged   bool      // this hold's start was logged
	lastLog  time.Time // when a hold's start was last logged
	episodes int       // holds since that one, itself included
}

// Backlog reports the changes the writer holds for lack of space.
func (h *hold) Backlog() Backlog {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		return Backlog{}
	}
	return Backlog{Changes: int(h.inHand.Load()) + h.queued(), Since: h.since, Err: h.err}
}

// whileNoSpace runs commit, the transaction of a group of changes. A
// single change the file system has no room for is tried again until it
// is committed or fails for another reason, or the writer is told to
// stop; a larger group is returned to be split. The hold is logged once
// when it starts and once when the writes resume.
func (h *hold) whileNoSpace(changes int, commit func() error) error {
	err := commit()
	for errors.Is(err, ErrNoSpace) && changes == 1 && h.waitForSpace(err) {
		err = commit()
	}
	if !errors.Is(err, ErrNoSpace) || changes == 1 {
		h.endHold(err)
	}
	return err
}

// stopping reports whether the writer is told to stop.
func (h *hold) stopping() bool {
	select {
	case <-h.closing:
		return true
	case <-h.stop:
		return true
	default:
		return false
	}
}

// waitForSpace records the refused change and waits until the file system
// holding the index has more room than it had, or the retry backoff
// passed. It reports false, at once, when the writer is to stop.
func (h *hold) waitForSpace(err error) bool {
	if h.stopping() {
		return false
	}
	h.mu.Lock()
	first := h.since.IsZero()
	if first {
		h.since, h.err = time.Now(), err
		h.episodes++
		if h.logged = time.Since(h.lastLog) > holdQuiet; h.logged {
			h.lastLog, h.episodes = h.since, 1
		}
	}
	logStart := first && h.logged
	wait := min(holdRetryMin<<min(h.retries, 5), holdRetryMax)
	h.retries++
	h.mu.Unlock()
	dir := filepath.Dir(h.file)
	before := freeBytes(dir)
	if logStart {
		h.logger.Warn("store: no space left for the index; holding changes and retrying once there is room",
			"path", h.file, "changes", h.Backlog().Changes, "free_bytes", before, "err", err)
	}
	poll := time.NewTicker(holdPoll)
	defer poll.Stop()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		select {
		case <-h.closing:
			return false
		case <-h.stop:
			return false
		case <-deadline.C:
			return true
		case <-poll.C:
			if freeBytes(dir) > before {
				return true
			}
		}
	}
}

// endHold logs that the writes resumed, or gave up, after a hold whose
// start was logged. Holds that start within holdQuiet of a logged one
// are counted instead, so a file system at the edge of full, where
// commits fail and succeed by turns, is logged every few minutes.
func (h *hold) endHold(err error) {
	h.mu.Lock()
	since, retries, logged, episodes := h.since, h.retries, h.logged, h.episodes
	h.since, h.err, h.retries, h.logged = time.Time{}, nil, 0, false
	h.mu.Unlock()
	switch {
	case since.IsZero() || (!logged && err == nil):
	case err == nil:
		h.logger.Info("store: index writes resumed", "path", h.file, "held_for", time.Since(since).Round(time.Millisecond),
			"retries", retries, "holds_since_logged", episodes)
	default:
		h.logger.Warn("store: gave up the changes held for lack of space", "path", h.file, "err", err)
	}
}

// freeBytes is the room left for an unprivileged writer on the file
// system holding dir, or 0 when it cannot be told.
func freeBytes(dir string) int64 {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return 0
	}
	return int64(st.Bavail) * st.Bsize
}
