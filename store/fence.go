package store

import (
	"context"
	"iter"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// Fences make a delete conditional on what happened since its caller
// looked at the file system. Two kinds:
//
//   - a drop fence guards one path (Fence, DropFenced). A caller that found
//     a path gone raises it, looks again, and drops behind it: every change
//     applied after it was raised that puts, adopts, moves or marks a record
//     at, under or above the path breaks it, and so does a caller about to
//     read a record there (Saw). The drop of a broken fence changes nothing
//     and fails with ErrConflict;
//   - a sweep fence guards a directory for a sweep (SweepFenced): it
//     remembers the paths that such changes and Saw touched since it was
//     raised, and each of the sweep's deletes is skipped when its path, or a
//     directory above it, is among them.
//
// Saw has to be called before its caller reads the record it may keep: a
// fenced delete applied but not yet committed would otherwise be read
// around, and the caller would keep a record that the commit then deletes.
// So Saw waits for such a commit, after which the read sees the delete.

// Fence guards a path; raise it with Fence or SweepFenced, lower it with
// Lift.
type Fence struct {
	path  string
	set   *fenceSet
	sweep bool
	// Guarded by set.mu:
	broken  bool              // a drop fence: something landed on its path
	touched map[string]bool   // a sweep fence: the paths touched under it
	over    bool              // a sweep fence: more touched than maxTouched
	applied map[string]uint64 // paths whose fenced delete is applied → the group it is in
}

// maxTouched bounds what a sweep fence remembers; beyond it every delete
// behind it is skipped.
const maxTouched = 1 << 20

// fenceSet is the store's raised fences and the writer's group numbers.
// The writer reads it for every change it applies; while no fence is
// raised that costs one atomic load.
type fenceSet struct {
	n         atomic.Int32
	mu        sync.Mutex
	m         map[*Fence]struct{}
	committed sync.Cond // signalled when a group ends
	applying  uint64    // the group being applied
	done      uint64    // the last group ended (committed or failed)
	waiting   int       // Saw calls waiting for a commit (for tests)
}

// Fence raises a drop fence on path (a file or a directory).
func (fs *fenceSet) Fence(path []byte) *Fence {
	return fs.raise(&Fence{path: string(path), set: fs})
}

func (fs *fenceSet) raise(f *Fence) *Fence {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.m == nil {
		fs.m = make(map[*Fence]struct{})
		fs.committed.L = &fs.mu
	}
	f.applied = make(map[string]uint64)
	fs.m[f] = struct{}{}
	fs.n.Store(int32(len(fs.m)))
	return f
}

// Lift lowers f; a lifted fence never breaks again.
func (f *Fence) Lift() {
	fs := f.set
	fs.mu.Lock()
	delete(fs.m, f)
	fs.n.Store(int32(len(fs.m)))
	fs.mu.Unlock()
}

// Broken reports whether a change has landed on a drop fence's path since
// it was raised.
func (f *Fence) Broken() bool {
	f.set.mu.Lock()
	defer f.set.mu.Unlock()
	return f.broken
}

// Saw tells the store that its caller found the file at path in place and
// is about to read its record, and may keep it without a write. The fences
// path overlaps break (a sweep fence remembers path), as a change there
// would break them; when a fenced delete that covers path is applied but
// not committed yet, Saw waits for its commit. It takes a string, unlike
// the rest of the store, so that the common case, no fence raised,
// converts nothing.
func (fs *fenceSet) Saw(path string) {
	if fs.active() {
		fs.saw(path)
	}
}

func (fs *fenceSet) saw(path string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var wait uint64
	for f := range fs.m {
		if g := f.appliedAbove(path); g > fs.done {
			wait = max(wait, g)
		}
		f.touch(path)
	}
	for fs.done < wait {
		fs.waiting++
		fs.committed.Wait()
		fs.waiting--
	}
}

// appliedAbove returns the group of a fenced delete applied at path or a
// directory above it, 0 when there is none.
func (f *Fence) appliedAbove(path string) uint64 {
	var g uint64
	if len(f.applied) > 0 {
		for a := range pathAndAbove(path) {
			g = max(g, f.applied[a])
		}
	}
	return g
}

// pathAndAbove yields path and every directory above it, "/" last.
func pathAndAbove(path string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for a := path; ; a = filepath.Dir(a) {
			if !yield(a) || a == "/" || a == "." {
				return
			}
		}
	}
}

// touch breaks a drop fence that path overlaps, or has a sweep fence
// remember path when path is under or above its directory. Called with
// set.mu held.
func (f *Fence) touch(path string) {
	switch {
	case !overlaps(path, f.path):
	case !f.sweep:
		f.broken = true
	case len(f.touched) >= maxTouched:
		f.over = true
	default:
		if f.touched == nil {
			f.touched = make(map[string]bool)
		}
		f.touched[path] = true
	}
}

// active reports whether any fence is raised.
func (fs *fenceSet) active() bool { return fs != nil && fs.n.Load() > 0 }

// touchChange is touch for every fence, for a change the writer applies.
func (fs *fenceSet) touchChange(c *Change) {
	path := touched(c)
	if path == "" {
		return
	}
	fs.mu.Lock()
	for f := range fs.m {
		f.touch(path)
	}
	fs.mu.Unlock()
}

// admit decides, as the writer applies it, whether the delete at path
// behind f goes ahead, and if so notes it as applied in the current group.
func (fs *fenceSet) admit(f *Fence, path string) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.broken || f.over || f.touchedAbove(path) {
		return false
	}
	f.applied[path] = fs.applying
	return true
}

// touchedAbove reports whether path or a directory above it was touched
// behind a sweep fence.
func (f *Fence) touchedAbove(path string) bool {
	if len(f.touched) > 0 {
		for a := range pathAndAbove(path) {
			if f.touched[a] {
				return true
			}
		}
	}
	return false
}

// beginGroup and endGroup number the writer's groups, so that Saw can
// wait for the commit of a fenced delete.
func (fs *fenceSet) beginGroup() {
	fs.mu.Lock()
	fs.applying = fs.done + 1
	fs.mu.Unlock()
}

func (fs *fenceSet) endGroup() {
	fs.mu.Lock()
	fs.done = fs.applying
	for f := range fs.m {
		clear(f.applied) // all ended: no Saw waits for them any more
	}
	if fs.committed.L != nil {
		fs.committed.Broadcast()
	}
	fs.mu.Unlock()
}

// touched is the path a change brings a record to, or "".
func touched(c *Change) string {
	switch c.Op {
	case OpPut, OpPutIf, OpMark, opAdopt:
		return string(c.Path)
	case OpMove:
		return string(c.NewPath)
	}
	return ""
}

// overlaps reports whether a and b are the same path or one is under the
// other.
func overlaps(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	return strings.HasPrefix(b, a) && (len(a) == len(b) || b[len(a)] == '/' || a == "/")
}

// DropFenced removes the records at and under f's path, as DeleteSubtree,
// unless f is broken when the change is applied: then nothing changes and
// the error is a *ConflictError for the path. Records of the file systems
// keep (if not nil) reports true for stay. It returns how many records it
// removed, and lifts f once the change is settled.
func (s *Store) DropFenced(ctx context.Context, f *Fence, keep func(dev uint64) bool) (int, error) {
	var n atomic.Int64
	ch := make(chan error, 1)
	s.submit(item{c: Change{Op: OpDeleteSubtree, Path: []byte(f.path), Fence: f, Keep: keep}, removed: &n,
		done: func(err error) { ch <- err }, waited: true})
	select {
	case err := <-ch:
		f.Lift()
		return int(n.Load()), err
	case <-ctx.Done():
		f.abandon()
		return 0, ctx.Err()
	}
}

// overflowed reports whether a sweep fence touched more paths than it
// remembers, so that every delete behind it was skipped.
func (f *Fence) overflowed() bool {
	f.set.mu.Lock()
	defer f.set.mu.Unlock()
	return f.over
}

// abandon lowers f with its deletes still queued: they are skipped.
func (f *Fence) abandon() {
	f.set.mu.Lock()
	f.broken, f.over = true, true
	f.set.mu.Unlock()
	f.Lift()
}
