package watcher

import (
	"container/heap"
	"path/filepath"
	"time"
)

// pendingSet holds a root's paths that are changing until each settles:
// Quiet after its last event, or MaxDelay after its first. Deadlines live
// in one heap (queue); the root's goroutine owns it.
type pendingSet struct {
	root  string
	opts  *Options
	items map[string]*item
	queue deadlines
}

func newPendingSet(root string, opts *Options) pendingSet {
	return pendingSet{root: root, opts: opts, items: make(map[string]*item)}
}

// get returns p's pending item, or nil.
func (ps *pendingSet) get(p string) *item { return ps.items[p] }

func (ps *pendingSet) len() int { return len(ps.items) }

// touch records an event on p and returns p's pending item: p settles
// Quiet after its last event. An event under a directory (one of dirs)
// that is itself waiting to be rescanned only pushes that directory's
// deadline back: its Rescan will cover p, and touch returns nil.
func (ps *pendingSet) touch(p string, wasDir bool, dirs map[string]map[string]struct{}) *item {
	now := time.Now()
	for a := p; a != ps.root; {
		a = filepath.Dir(a)
		if it, ok := ps.items[a]; ok {
			if _, dir := dirs[a]; dir {
				ps.queue.touch(it, now, ps.opts)
				return nil
			}
		}
	}
	if it, ok := ps.items[p]; ok {
		it.wasDir = it.wasDir || wasDir
		ps.queue.touch(it, now, ps.opts)
		return it
	}
	it := &item{path: p, first: now, due: now.Add(ps.opts.Quiet), wasDir: wasDir}
	ps.items[p] = it
	heap.Push(&ps.queue, it)
	return it
}

// above reports whether a directory above p is pending.
func (ps *pendingSet) above(p string) bool {
	for a := p; a != ps.root; {
		a = filepath.Dir(a)
		if _, ok := ps.items[a]; ok {
			return true
		}
	}
	return false
}

// drop forgets p's pending item, if any.
func (ps *pendingSet) drop(p string) {
	if it := ps.items[p]; it != nil {
		heap.Remove(&ps.queue, it.index)
		delete(ps.items, p)
	}
}

// popDue removes and returns the item due first if it is due at now;
// nil when none is.
func (ps *pendingSet) popDue(now time.Time) *item {
	if ps.queue.Len() == 0 || ps.queue.items[0].due.After(now) {
		return nil
	}
	it := heap.Pop(&ps.queue).(*item)
	delete(ps.items, it.path)
	return it
}

// next is the earliest deadline; zero when nothing is pending.
func (ps *pendingSet) next() time.Time {
	if ps.queue.Len() > 0 {
		return ps.queue.items[0].due
	}
	return time.Time{}
}

// reset forgets every pending path.
func (ps *pendingSet) reset() {
	clear(ps.items)
	ps.queue.items = ps.queue.items[:0]
}

// item is one pending path.
type item struct {
	path   string
	first  time.Time // first event since it was last emitted
	due    time.Time
	index  int     // in the heap
	wasDir bool    // it was a watched directory when an event came
	inode  inodeID // the file's, from the first Write since it came there; zero if unknown
	sure   bool    // inode is confirmed (confirm.go): no rename came between write and stat
	left   inodeID // the directory's, when it was renamed away and waits in root.left
	moved  bool    // its directory's Moved went out: emit nothing
}

// comeBack notes that something was created at the path: an item whose
// directory was moved away emits what is there now. It accepts a nil
// item.
func (it *item) comeBack() {
	if it != nil {
		it.moved = false
	}
}

// forgetInode makes the next Write stat the file again: another may have
// come to the path. It accepts a nil item.
func (it *item) forgetInode() {
	if it != nil {
		it.inode, it.sure = inodeID{}, false
	}
}

// deadlines is a min-heap of pending items by due time.
type deadlines struct{ items []*item }

func (q *deadlines) Len() int           { return len(q.items) }
func (q *deadlines) Less(i, j int) bool { return q.items[i].due.Before(q.items[j].due) }
func (q *deadlines) Swap(i, j int) {
	q.items[i], q.items[j] = q.items[j], q.items[i]
	q.items[i].index = i
	q.items[j].index = j
}
func (q *deadlines) Push(x any) {
	it := x.(*item)
	it.index = len(q.items)
	q.items = append(q.items, it)
}
func (q *deadlines) Pop() any {
	n := len(q.items) - 1
	it := q.items[n]
	q.items[n] = nil
	q.items = q.items[:n]
	return it
}

// touch moves it's deadline to Quiet from now, but no later than MaxDelay
// after its first event.
func (q *deadlines) touch(it *item, now time.Time, o *Options) {
	due := now.Add(o.Quiet)
	if limit := it.first.Add(o.MaxDelay); due.After(limit) {
		due = limit
	}
	it.due = due
	heap.Fix(q, it.index)
}
