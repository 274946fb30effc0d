package query

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/store"
)

// refSource is what refCountTree reads.
type refSource interface {
	Folders(ctx context.Context, fn func(dir []byte, files []store.FolderFile) error) error
	Dups(ctx context.Context, opts store.DupOptions, fn func(store.Group) error) error
}

// refCountTree is the tree counted as it was before DupFiles: every
// duplicate group listed by store.Dups with a path per member. Tests
// and the benchmark hold countTree to its answers and its cost.
func refCountTree(ctx context.Context, src refSource, set roots.Set) (*treeCount, error) {
	c := &treeCount{at: time.Now(), byPath: map[string]int32{}, complete: true}
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
	err = src.Dups(ctx, store.DupOptions{Brief: true}, func(g store.Group) error {
		for _, e := range refExtraCopies(g, set) {
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

// refCopy is what one extra copy of a content would give back.
type refCopy struct {
	path  []byte
	bytes int64
}

// refExtraCopies lists the inodes of g within set that deduplication would
// free, each under its first name in path order. With a survey: on each
// file system every known inode but the one holding least alone, by
// what it holds alone (store.Survey.Reclaimable). Without: every inode
// but the first, by its size.
func refExtraCopies(g store.Group, set roots.Set) []refCopy {
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
	var out []refCopy
	if g.Survey == nil {
		for _, in := range order[1:] {
			out = append(out, refCopy{first[in], g.Size})
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
		out = append(out, refCopy{first[in], sv.Inodes[i].Alone})
	}
	return out
}
