package watcher

import (
	"context"
	"path/filepath"
	"slices"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/roots"
)

// # Mounts
//
// An unmount sends inotify no event that a consumer sees (fsnotify drops
// IN_UNMOUNT and IN_IGNORED), and a mount over a watched directory leaves
// the watch on the directory underneath. So the watcher follows the mount
// table (fsstat.WatchMounts) and, for each root, the mounts that hold the
// root or lie under it:
//
//   - the root's own mount changed (unmounted, mounted again, another file
//     system mounted there): the root's watches are set up again and the
//     root is rescanned (ReasonMount); when the root is gone, the root
//     waits, as a removed root does, with Status saying why, and comes
//     back when the mount table changes again;
//   - a mount under the root changed: its mount point's watches are set up
//     again and it is rescanned.
//
// Walks and watches cross mount points inside a root, as find does
// without -xdev, unless Options.OneFileSystem. The consumer keeps the
// records of a file system that is not mounted at their place
// (internal/indexer's rule).

// ReasonMount is the Reason of a Rescan after the mount table changed at
// or under the directory.
const ReasonMount = "mount"

// mountView is what a root knows of the mount table: the mounts at or
// under its real path, by mount point, and under "" the one that holds it
// from above.
type mountView map[string]fsstat.Mount

// viewOf picks the mounts of the root at real from the table. Of mounts
// stacked on one point the last one listed is on top.
func viewOf(real string, mounts []fsstat.Mount) mountView {
	v := mountView{}
	for _, m := range mounts {
		switch {
		case roots.Within(m.Point, real):
			v[m.Point] = m
		case roots.Within(real, m.Point):
			if h, ok := v[""]; !ok || len(m.Point) >= len(h.Point) {
				v[""] = m
			}
		}
	}
	return v
}

// changedPoints lists the mount points whose mount differs between a and
// b, outermost first; "" stands for the mount above the root.
func changedPoints(a, b mountView) []string {
	var out []string
	for p, m := range a {
		if n, ok := b[p]; !ok || n.ID != m.ID || n.Dev != m.Dev {
			out = append(out, p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			out = append(out, p)
		}
	}
	slices.Sort(out) // "" and outer points first
	return out
}

// watchMounts tells every root of each change of the mount table, until
// ctx ends.
func (w *Watcher) watchMounts(ctx context.Context) error {
	err := fsstat.WatchMounts(ctx, func() {
		for _, r := range w.roots {
			select {
			case r.mounts.changed <- struct{}{}:
			default: // one is waiting already: it reads the table then
			}
		}
	})
	if err != nil {
		w.opts.Logger.Warn("cannot follow the mount table; unmounts and mounts under the roots are seen at the periodic rescans", "err", err)
	}
	return nil
}

// mountFollow is what a root follows of the mount table.
type mountFollow struct {
	changed chan struct{} // the mount table changed (watchMounts)
	view    mountView     // the mounts at, under and above the root, as last read
	known   bool          // view was read
}

// update takes the mounts of the root at real from the table and returns
// the mount points that changed since the last view, and both views;
// known says whether there was a last view.
func (mf *mountFollow) update(real string, mounts []fsstat.Mount) (changed []string, old, now mountView, known bool) {
	now, old, known = viewOf(real, mounts), mf.view, mf.known
	mf.view, mf.known = now, true
	return changedPoints(old, now), old, now, known
}

// realPath is the root with its symlinks resolved, as the mount table
// spells it; the root's own spelling if it cannot be resolved.
func realPath(root string) string {
	if p, err := filepath.EvalSymlinks(root); err == nil {
		return p
	}
	return root
}

// given turns a mount point under the root's real path into the root's
// spelling.
func given(root, real, point string) string {
	if point == "" || point == real {
		return root
	}
	return filepath.Join(root, roots.Rel(point, real))
}

// mountsChanged acts on a change of the mount table (see Mounts above).
func (r *root) mountsChanged(ctx context.Context) bool {
	mounts, err := fsstat.Mounts()
	if err != nil {
		return true
	}
	real := realPath(r.path)
	changed, old, now, known := r.mounts.update(real, mounts)
	if r.noInstance || len(changed) == 0 || !known {
		return true
	}
	if changed[0] == "" || changed[0] == real {
		_, was := old[real]
		_, is := now[real]
		return r.remountRoot(ctx, was && !is)
	}
	if r.opts.OneFileSystem {
		return true // mounts under the root are left out
	}
	var done []string
	for _, p := range changed {
		if slices.ContainsFunc(done, func(d string) bool { return roots.Within(p, d) }) {
			continue
		}
		done = append(done, p)
		if !r.rewatch(ctx, given(r.path, real, p)) {
			return false
		}
	}
	return true
}

// remountRoot handles a change of the mount that holds the root: the root
// is watched and rescanned afresh, or waits while it is gone. unmounted
// says the file system mounted at the root went away: the folder beneath
// is watched meanwhile, and Status says so.
func (r *root) remountRoot(ctx context.Context, unmounted bool) bool {
	if fi, err := fsstat.Lstat(r.path); err != nil || !fi.IsDir() {
		if r.rootGone {
			return true
		}
		r.log.Warn("the root's file system is not mounted; waiting for it", "err", err)
		r.rootGone, r.awayWhy = true, "file system not mounted, waiting"
		r.dropTree(r.path)
		return r.emit(ctx, Event{Kind: Removed, Path: r.path})
	}
	switch {
	case unmounted:
		r.log.Warn("the file system mounted at the root is not mounted; watching the folder beneath it meanwhile")
	case r.rootGone || r.awayWhy != "":
		r.log.Info("the root's file system is mounted again")
	default:
		r.log.Info("the root's mount changed; watching and rescanning it afresh")
	}
	r.rootGone, r.awayWhy = false, ""
	if unmounted {
		r.awayWhy = "file system not mounted, waiting (the folder beneath it is watched)"
	}
	return r.rescanRoot(ctx, ReasonMount)
}

// rewatch sets up the watches of the mount point p (or of the nearest
// directory above it that exists) afresh and rescans it.
func (r *root) rewatch(ctx context.Context, p string) bool {
	for {
		if fi, err := fsstat.Lstat(p); err == nil && fi.IsDir() {
			break
		}
		if p == r.path {
			return r.remountRoot(ctx, false)
		}
		p = filepath.Dir(p)
	}
	r.log.Info("a mount under the root changed; watching and rescanning it afresh", "dir", p)
	r.dropTree(p)
	r.addTree(p)
	return r.emit(ctx, Event{Kind: Rescan, Path: p, Reason: ReasonMount})
}
