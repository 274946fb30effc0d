package store

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
)

// Fences make a drop conditional on what happened since its caller looked.
// A caller that found a path gone raises a fence on it, looks at the path
// again, and drops with the fence (DropFenced). Every change applied after
// the fence was raised that puts, adopts, moves or marks a record at, under
// or above the fenced path breaks it, and the drop then fails with
// ErrConflict instead of deleting records that describe the file system
// after the caller's second look: a directory renamed into the path, or a
// walk that found files there.

// Fence guards one path; raise it with Fence, lower it with Lift.
type Fence struct {
	path   string
	set    *fenceSet
	broken atomic.Bool
}

// fenceSet is the store's raised fences. The writer reads it for every
// change it applies; while none is raised that costs one atomic load.
type fenceSet struct {
	n  atomic.Int32
	mu sync.Mutex
	m  map[*Fence]struct{}
}

// Fence raises a fence on path (a file or a directory).
func (s *Store) Fence(path []byte) *Fence {
	f := &Fence{path: string(path), set: &s.fences}
	fs := &s.fences
	fs.mu.Lock()
	if fs.m == nil {
		fs.m = make(map[*Fence]struct{})
	}
	fs.m[f] = struct{}{}
	fs.n.Store(int32(len(fs.m)))
	fs.mu.Unlock()
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

// Broken reports whether a change has landed on f's path since it was
// raised.
func (f *Fence) Broken() bool { return f.broken.Load() }

// Saw tells the store that its caller found path in place and left its
// record as it is, a look that writes nothing: the fences that path
// overlaps break, as a change there would break them. It takes a string, unlike the rest of the store, so that the common
// case, no fence raised, converts nothing.
func (s *Store) Saw(path string) {
	if s.fences.active() {
		s.fences.touch(path)
	}
}

// touch breaks the fences that path overlaps: path is at, under or above
// the fenced path.
func (fs *fenceSet) touch(path string) {
	if path == "" {
		return // a change that brings no record
	}
	fs.mu.Lock()
	for f := range fs.m {
		if overlaps(path, f.path) {
			f.broken.Store(true)
		}
	}
	fs.mu.Unlock()
}

// active reports whether any fence is raised.
func (fs *fenceSet) active() bool { return fs != nil && fs.n.Load() > 0 }

// touched is the path a change brings a record to, or nil.
func touched(c *Change) []byte {
	switch c.Op {
	case OpPut, OpPutIf, OpMark, opAdopt:
		return c.Path
	case OpMove:
		return c.NewPath
	}
	return nil
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
// the error is a *ConflictError for the path. It returns how many records
// it removed.
func (s *Store) DropFenced(ctx context.Context, f *Fence) (int, error) {
	it := item{c: Change{Op: OpDeleteSubtree, Path: []byte(f.path), Fence: f}}
	var n atomic.Int64
	it.removed = &n
	err := s.wait(ctx, it)
	return int(n.Load()), err
}
