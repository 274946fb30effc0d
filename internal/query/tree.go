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

// treeNode is one folder: its own files, then its subtree's totals.
type treeNode struct {
	path                         string
	parent                       int32 // -1 for a root
	ownFiles, ownBytes, ownReclm int64
	files, bytes, reclaim        int64
	kids                         []int32
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
	c, err := countTree(ctx, t.x.cfg.Store, t.x.cfg.Roots)
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
	Dups(ctx context.Context, opts store.DupOptions, fn func(store.Group) error) error
}

// countTree reads every folder's files and every duplicate group of src
// within set.
func countTree(ctx context.Context, src treeSource, set roots.Set) (*treeCount, error) {
	c := &treeCount{at: time.Now(), byPath: map[string]int32{}, complete: true}
	for _, r := range set.Paths() {
		c.roots = append(c.roots, c.add(r, -1))
	}
	var lastDir []byte
	last := int32(-1)
	err := src.Folders(ctx, func(dir []byte, files []store.FolderFile) error {
		if last < 0 || !bytes.Equal(dir, lastDir) {
			last, lastDir = c.folder(set, string(dirPath(dir))), append(lastDir[:0], dir...)
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
	err = src.Dups(ctx, store.DupOptions{Brief: true}, func(g store.Group) error {
		for _, e := range extraCopies(g, set) {
			if n, ok := c.byPath[string(dirPath(parentDir(e.path)))]; ok {
				c.nodes[n].ownReclm += e.bytes
			}
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
func (c *treeCount) folder(set roots.Set, path string) int32 {
	if n, ok := c.byPath[path]; ok {
		return n
	}
	if !set.Contains(path) {
		return -1
	}
	up := string(parentDir([]byte(path)))
	return c.add(path, c.folder(set, up))
}

// add makes the node of path below parent.
func (c *treeCount) add(path string, parent int32) int32 {
	n := int32(len(c.nodes))
	c.nodes = append(c.nodes, treeNode{path: path, parent: parent})
	c.byPath[path] = n
	if parent >= 0 {
		c.nodes[parent].kids = append(c.nodes[parent].kids, n)
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
	kids := c.roots
	if path != nil {
		i, ok := c.byPath[string(path)]
		if !ok {
			return out, fmt.Errorf("%w: no indexed folder %s", api.ErrNotFound, strings.ToValidUTF8(string(path), "\uFFFD"))
		}
		n := &c.nodes[i]
		out.TreeNode = c.node(i)
		kids = n.kids
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

// extraCopy is what one extra copy of a content would give back.
type extraCopy struct {
	path  []byte
	bytes int64
}

// extraCopies lists the inodes of g within set that deduplication would
// free, each under its first name in path order. With a survey: on each
// file system every known inode but the one holding least alone, by
// what it holds alone (store.Survey.Reclaimable). Without: every inode
// but the first, by its size.
func extraCopies(g store.Group, set roots.Set) []extraCopy {
	slices.SortFunc(g.Members, func(a, b store.Member) int { return bytes.Compare(a.Path, b.Path) })
	type inode struct{ dev, ino uint64 }
	first := map[inode][]byte{}
	var order []inode
	for _, m := range g.Members {
		if !set.Contains(string(m.Path)) {
			continue
		}
		in := inode{m.Record.Dev, m.Record.Ino}
		if _, seen := first[in]; !seen {
			first[in] = m.Path
			order = append(order, in)
		}
	}
	if len(order) < 2 {
		return nil
	}
	var out []extraCopy
	if g.Survey == nil {
		for _, in := range order[1:] {
			out = append(out, extraCopy{first[in], g.Size})
		}
		return out
	}
	sv := g.Survey
	keeper := map[uint64]int{} // by device: the survey index of the inode holding least alone
	for _, in := range order {
		i := sv.Find(in.dev, in.ino)
		if i < 0 || !sv.Inodes[i].Known {
			continue
		}
		if k, ok := keeper[in.dev]; !ok || sv.Inodes[i].Alone < sv.Inodes[k].Alone {
			keeper[in.dev] = i
		}
	}
	for _, in := range order {
		i := sv.Find(in.dev, in.ino)
		if i < 0 || !sv.Inodes[i].Known || keeper[in.dev] == i {
			continue
		}
		out = append(out, extraCopy{first[in], sv.Inodes[i].Alone})
	}
	return out
}
