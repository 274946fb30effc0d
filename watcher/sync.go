package watcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// ErrSync is returned by Sync when it cannot make its cookie.
var ErrSync = errors.New("watcher: sync")

// cookiePrefix starts the name of every cookie file in Options.SyncDir.
const cookiePrefix = "cookie-"

// Sync returns once every inotify event that the kernel had queued for any
// root before Sync was called has been read by the watcher: it is in the
// pending set (Status counts it) or has been sent on Events. It makes a
// cookie file in Options.SyncDir, which every root's inotify instance
// watches, and waits until each root has read the cookie's own event:
// inotify delivers one instance's events in order.
//
// Roots that cannot see the cookie are not waited for: a root without an
// inotify instance, or whose watch on SyncDir could not be added or was
// removed, and every root once Run has returned. A root that overflowed
// acknowledges every cookie it was waiting for (its cookie event may be
// lost): its overflow Rescan, counted in Status as pending until it is
// sent, covers everything before it. Without Options.SyncDir, and before
// Run, Sync returns nil at once: a best-effort barrier then. During a
// root's set-up of its watches Sync waits for the set-up, after which the
// root reads its queued events.
//
// Sync returns ctx.Err() when ctx ends first. It is safe for concurrent
// use; every call makes its own cookie. It costs nothing when not called.
func (w *Watcher) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if w.opts.SyncDir == "" {
		return nil
	}
	name := cookiePrefix + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(w.cookies.Add(1), 10)
	c := &cookie{done: make(chan struct{})}
	c.left.Store(1) // Sync's own hold, so no ack ends the wait before every root is asked
	var asked []*root
	for _, r := range w.roots {
		if r.sync.expect(name, c, r.confirm.stats.Load()) {
			asked = append(asked, r)
		}
	}
	defer func() {
		for _, r := range asked {
			r.sync.forget(name)
		}
	}()
	if len(asked) == 0 {
		return nil
	}
	if err := makeCookie(filepath.Join(w.opts.SyncDir, name)); err != nil {
		return err
	}
	c.ack()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RemoveCookies removes the cookie files a Sync left in dir (a process
// killed while it waited); other files are left alone.
func RemoveCookies(dir string) error {
	names, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSync, err)
	}
	for _, n := range names {
		if !strings.HasPrefix(n.Name(), cookiePrefix) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %w", ErrSync, err)
		}
	}
	return nil
}

// makeCookie creates and removes the file p: its IN_CREATE is the cookie.
func makeCookie(p string) error {
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("%w: create %s: %w", ErrSync, p, err)
	}
	unix.Close(fd)
	if err := unix.Unlink(p); err != nil {
		return fmt.Errorf("%w: remove %s: %w", ErrSync, p, err)
	}
	return nil
}

// cookie is one Sync's wait: done closes when every root asked has acked.
type cookie struct {
	left atomic.Int32
	done chan struct{}
}

func (c *cookie) ack() {
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
}

// cookies are a root's outstanding Sync cookies; shared between Sync and
// the root's goroutine.
type cookies struct {
	mu      sync.Mutex
	on      bool // the root's goroutine reads events of SyncDir
	waiting map[string]*cookie
	stats   map[string]uint64 // by name: the root's write stats made before the cookie
}

// expect registers c under name when the root can see cookies; stats is
// the count of the root's write stats so far (confirm.go).
func (cs *cookies) expect(name string, c *cookie, stats uint64) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if !cs.on {
		return false
	}
	if cs.waiting == nil {
		cs.waiting, cs.stats = make(map[string]*cookie), make(map[string]uint64)
	}
	c.left.Add(1)
	cs.waiting[name], cs.stats[name] = c, stats
	return true
}

func (cs *cookies) forget(name string) {
	cs.mu.Lock()
	delete(cs.waiting, name)
	delete(cs.stats, name)
	cs.mu.Unlock()
}

// statsBefore returns the count of write stats made before the cookie
// called name, and whether someone waits for it.
func (cs *cookies) statsBefore(name string) (uint64, bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	_, ok := cs.waiting[name]
	return cs.stats[name], ok
}

// ack acknowledges the cookie called name, if someone waits for it.
func (cs *cookies) ack(name string) {
	cs.mu.Lock()
	c := cs.waiting[name]
	delete(cs.waiting, name)
	delete(cs.stats, name)
	cs.mu.Unlock()
	if c != nil {
		c.ack()
	}
}

// isOn reports whether the root watches the sync directory.
func (cs *cookies) isOn() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.on
}

// set turns the root's cookie handling on or off; off, or on overflow
// (ackAll), acknowledges every cookie it was waiting for.
func (cs *cookies) set(on bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.on = on
	cs.ackAllLocked()
}

func (cs *cookies) ackAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.ackAllLocked()
}

func (cs *cookies) ackAllLocked() {
	for name, c := range cs.waiting {
		delete(cs.waiting, name)
		delete(cs.stats, name)
		c.ack()
	}
}

// watchSyncDir adds the watch on Options.SyncDir to the root's inotify
// instance. It is not one of the root's watches: not counted in Status,
// never dropped by a rescan.
func (r *root) watchSyncDir() {
	if r.opts.SyncDir == "" || r.fsw == nil {
		return
	}
	if err := r.fsw.Add(r.opts.SyncDir); err != nil {
		r.log.Warn("cannot watch the sync directory; sync barriers will not wait for this root",
			"path", r.opts.SyncDir, "err", err)
		return
	}
	r.sync.set(true)
}

// syncEvent handles an event in or of Options.SyncDir and reports whether
// ev was one; such events never reach the pending set.
func (r *root) syncEvent(ev fsnotify.Event) bool {
	dir := r.opts.SyncDir
	if dir == "" || !strings.HasPrefix(ev.Name, dir) {
		return false
	}
	switch {
	case len(ev.Name) > len(dir) && ev.Name[len(dir)] == '/':
		if ev.Has(fsnotify.Create) && !r.dropCookies.Load() {
			name := ev.Name[len(dir)+1:]
			if r.confirmed(name) {
				return true
			}
			if stats, ok := r.sync.statsBefore(name); ok && r.holdSync(name, stats) {
				return true
			}
			// Publish what earlier events did before the waiter looks.
			r.publish()
			r.sync.ack(name)
		}
		return true
	case len(ev.Name) == len(dir):
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			r.log.Warn("the sync directory is gone; sync barriers will not wait for this root", "path", dir)
			r.sync.set(false)
			r.doubtAll()
		}
		return true
	}
	return false
}
