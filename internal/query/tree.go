package query

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/store"
)

// treeKeep is how long an unused count of the tree is kept.
const treeKeep = 5 * time.Minute

// Tree answers the indexed tree one folder level at a time (api.Treer).
// It counts the whole tree in one read of the index (every folder's
// files, then the duplicate groups) and keeps that count while the index
// is unchanged, so each level after the first costs a map look-up.
type Tree struct {
	x *Index

	mu    sync.Mutex // one count at a time; callers meanwhile wait for it
	last  *treeCount
	timer *time.Timer // drops last once unused for treeKeep
}

// NewTree returns the tree of x's index, within its roots.
func NewTree(x *Index) *Tree { return &Tree{x: x} }

var _ api.Treer = (*Tree)(nil)

// treeCount is the tree counted at one commit of the index.
type treeCount struct {
	commit   uint64
	at       time.Time
	nodes    []treeNode
	byPath   map[string]int32
	roots    []int32
	complete bool
}

// treeNode is one folder: its own files, then its subtree's totals. Its
// children are a list: the first, then each one's next.
type treeNode struct {
	path                         string
	parent, kid, next            int32 // -1 for none
	ownFiles, ownBytes, ownReclm int64
	files, bytes, reclaim        int64
}

// TreeLevel returns the folder at path and its children; nil path: the
// roots.
func (t *Tree) TreeLevel(ctx context.Context, path []byte) (api.TreeLevel, error) {
	c, err := t.count(ctx)
	if err != nil {
		return api.TreeLevel{}, err
	}
	return c.level(path)
}

// count returns the count of the tree as the index is now: the last one
// while no commit came since, else a new one.
func (t *Tree) count(ctx context.Context) (*treeCount, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer == nil {
		t.timer = time.AfterFunc(treeKeep, t.drop)
	}
	t.timer.Reset(treeKeep)
	commit, err := t.x.cfg.Store.Committed()
	if err != nil {
		return nil, err
	}
	if t.last != nil && t.last.commit == commit {
		return t.last, nil
	}
	folders := 0
	if t.last != nil {
		folders = len(t.last.nodes)
		t.last = nil // its memory may go back while the next count is made
	}
	c, err := countTree(ctx, t.x.cfg.Store, t.x.cfg.Roots, folders)
	if err != nil {
		return nil, err
	}
	c.commit = commit
	t.last = c
	return c, nil
}

// drop forgets the last count: its memory goes back once nobody looks.
func (t *Tree) drop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = nil
}

// treeSource is what a count of the tree reads.
type treeSource interface {
	Folders(ctx context.Context, fn func(dir []byte, files []store.FolderFile) error) error
	DupFiles(ctx context.Context, fn func(*store.GroupFiles) error) error
}

// countTree reads every folder's files and every duplicate group's
// files of src within set. Neither read keeps a path per file: files are
// counted into their folder's node, and extra copies found one group at
// a time. folders sizes the tables (the last count's folders, or 0).
func countTree(ctx context.Context, src treeSource, set roots.Set, folders int) (*treeCount, error) {
	c := &treeCount{at: time.Now(), byPath: make(map[string]int32, folders), nodes: make([]treeNode, 0, folders), complete: true}
	for _, r := range set.Paths() {
		c.roots = append(c.roots, c.add(r, -1))
	}
	var lastDir []byte
	last := int32(-1)
	err := src.Folders(ctx, func(dir []byte, files []store.FolderFile) error {
		if last < 0 || !bytes.Equal(dir, lastDir) {
			last, lastDir = c.folder(set, dirPath(dir)), append(lastDir[:0], dir...)
		}
		if last < 0 {
			return nil // outside the roots
		}
		n := &c.nodes[last]
		for i := range files {
			n.ownFiles++
			n.ownBytes += files[i].Size
			if !files[i].Keyed() {
				c.complete = false
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("query: tree: %w", err)
	}
	var x extras
	err = src.DupFiles(ctx, func(g *store.GroupFiles) error {
		for _, e := range x.of(c, g, set) {
			c.nodes[e.node].ownReclm += e.bytes
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("query: tree: %w", err)
	}
	c.total()
	return c, nil
}

// dirPath turns a dirs-index key ("/a/b/") into the folder's path.
func dirPath(dir []byte) []byte {
	if len(dir) > 1 && dir[len(dir)-1] == '/' {
		return dir[:len(dir)-1]
	}
	return dir
}

// parentDir returns the folder of the file at p.
func parentDir(p []byte) []byte {
	i := bytes.LastIndexByte(p, '/')
	if i <= 0 {
		return p[:1]
	}
	return p[:i]
}

// folder returns the node of path, making it and those above it up to
// its root; -1 when path is outside every root.
func (c *treeCount) folder(set roots.Set, path []byte) int32 {
	if n, ok := c.byPath[string(path)]; ok {
		return n
	}
	p := string(path)
	if !set.Contains(p) {
		return -1
	}
	return c.add(p, c.folder(set, parentDir(path)))
}

// add makes the node of path below parent.
func (c *treeCount) add(path string, parent int32) int32 {
	n := int32(len(c.nodes))
	c.nodes = append(c.nodes, treeNode{path: path, parent: parent, kid: -1, next: -1})
	c.byPath[path] = n
	if parent >= 0 {
		c.nodes[n].next, c.nodes[parent].kid = c.nodes[parent].kid, n
	}
	return n
}

// total adds every folder's own figures to it and those above it: a
// node comes after its parent, so one pass backwards is enough.
func (c *treeCount) total() {
	for i := range c.nodes {
		n := &c.nodes[i]
		n.files, n.bytes, n.reclaim = n.ownFiles, n.ownBytes, n.ownReclm
	}
	for i := len(c.nodes) - 1; i >= 0; i-- {
		n := &c.nodes[i]
		if n.parent >= 0 {
			p := &c.nodes[n.parent]
			p.files += n.files
			p.bytes += n.bytes
			p.reclaim += n.reclaim
		}
	}
}

// level answers the folder at path, or the roots for nil.
func (c *treeCount) level(path []byte) (api.TreeLevel, error) {
	out := api.TreeLevel{Complete: c.complete, ComputedAt: c.at.UnixMilli()}
	kids := slices.Clone(c.roots)
	if path != nil {
		i, ok := c.byPath[string(path)]
		if !ok {
			return out, fmt.Errorf("%w: no indexed folder %s", api.ErrNotFound, strings.ToValidUTF8(string(path), "\uFFFD"))
		}
		n := &c.nodes[i]
		out.TreeNode = c.node(i)
		kids = kids[:0]
		for k := n.kid; k >= 0; k = c.nodes[k].next {
			kids = append(kids, k)
		}
		if n.ownFiles > 0 {
			out.Children = append(out.Children, api.TreeNode{Path: path, Name: "", Files: n.ownFiles,
				Bytes: n.ownBytes, Reclaimable: n.ownReclm})
		}
	} else {
		out.Folder = true
		for _, r := range c.roots {
			n := &c.nodes[r]
			out.Bytes, out.Files, out.Reclaimable = out.Bytes+n.bytes, out.Files+n.files, out.Reclaimable+n.reclaim
		}
	}
	for _, k := range kids {
		out.Children = append(out.Children, c.node(k))
	}
	slices.SortStableFunc(out.Children, func(a, b api.TreeNode) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// node is node i as the API says it.
func (c *treeCount) node(i int32) api.TreeNode {
	n := &c.nodes[i]
	name := n.path
	if n.parent >= 0 {
		name = n.path[bytes.LastIndexByte([]byte(n.path), '/')+1:]
	}
	return api.TreeNode{Path: []byte(n.path), Name: name, Folder: true, Files: n.files, Bytes: n.bytes, Reclaimable: n.reclaim}
}

// extraCopy is what one extra copy of a content would give back, and
// the folder of the name it is counted under.
type extraCopy struct {
	node  int32
	bytes int64
}

// extras finds the extra copies of groups, one at a time, in buffers it
// keeps for the next group.
type extras struct {
	in    []member // the group's files within the roots, in path order
	order []member // their inodes, each by its first name
	seen  map[inode]struct{}
	keep  []keeper // by device: the survey index of the inode holding least alone
	out   []extraCopy
}

type inode struct{ dev, ino uint64 }

// member is a file of a group within the roots, in its folder's node
// (-1 when its folder was not counted: added since).
type member struct {
	node int32
	f    *store.GroupFile
}

type keeper struct {
	dev uint64
	i   int
}

// smallGroup is the most files a group may have for extras to find
// their distinct inodes by looking back rather than in a map.
const smallGroup = 16

// of lists the inodes of g within set that deduplication would free,
// each under its first name in path order. With a survey: on each file
// system every known inode but the one holding least alone, by what it
// holds alone (store.Survey.Reclaimable). Without: every inode but the
// first, by its size. Copies whose folder c did not count are left out.
// The answer is valid until the next call.
func (x *extras) of(c *treeCount, g *store.GroupFiles, set roots.Set) []extraCopy {
	x.in, x.order, x.out = x.in[:0], x.order[:0], x.out[:0]
	for i := range g.Files {
		f := &g.Files[i]
		n, ok := c.byPath[string(dirPath(f.Path[:f.Dir]))]
		if !ok {
			if !set.Contains(string(f.Path)) {
				continue
			}
			n = -1
		}
		x.in = append(x.in, member{n, f})
	}
	slices.SortFunc(x.in, func(a, b member) int { return bytes.Compare(a.f.Path, b.f.Path) })
	x.distinct()
	if len(x.order) < 2 {
		return nil
	}
	if g.Survey == nil {
		for _, m := range x.order[1:] {
			x.put(m.node, g.Size)
		}
		return x.out
	}
	sv := g.Survey
	x.keep = x.keep[:0]
	for _, m := range x.order {
		i := sv.Find(m.f.Dev, m.f.Ino)
		if i < 0 || !sv.Inodes[i].Known {
			continue
		}
		k := slices.IndexFunc(x.keep, func(k keeper) bool { return k.dev == m.f.Dev })
		switch {
		case k < 0:
			x.keep = append(x.keep, keeper{m.f.Dev, i})
		case sv.Inodes[i].Alone < sv.Inodes[x.keep[k].i].Alone:
			x.keep[k].i = i
		}
	}
	for _, m := range x.order {
		i := sv.Find(m.f.Dev, m.f.Ino)
		if i < 0 || !sv.Inodes[i].Known {
			continue
		}
		if k := slices.IndexFunc(x.keep, func(k keeper) bool { return k.dev == m.f.Dev }); x.keep[k].i == i {
			continue
		}
		x.put(m.node, sv.Inodes[i].Alone)
	}
	return x.out
}

// distinct keeps in x.order the first member of each inode of x.in.
func (x *extras) distinct() {
	if len(x.in) <= smallGroup {
		for _, m := range x.in {
			if !slices.ContainsFunc(x.order, func(o member) bool { return o.f.Dev == m.f.Dev && o.f.Ino == m.f.Ino }) {
				x.order = append(x.order, m)
			}
		}
		return
	}
	x.seen = make(map[inode]struct{}, len(x.in)) // a big group: rare, and a fresh map costs no clearing
	for _, m := range x.in {
		in := inode{m.f.Dev, m.f.Ino}
		if _, ok := x.seen[in]; !ok {
			x.seen[in] = struct{}{}
			x.order = append(x.order, m)
		}
	}
	x.seen = nil
}

// put counts an extra copy in folder n, unless n was not counted.
func (x *extras) put(n int32, b int64) {
	if n >= 0 {
		x.out = append(x.out, extraCopy{n, b})
	}
}
