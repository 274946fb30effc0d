package indexer

import (
	"context"

	"github.com/annexd/annexd/store"
)

// The store calls, in one place.

func (ix *Indexer) get(path string) (store.Record, bool, error) {
	return ix.st.Get([]byte(path))
}

func (ix *Indexer) submit(c store.Change, done func(error)) {
	ix.st.Submit(c, done)
}

func putChange(path string, rec store.Record) store.Change {
	return store.Change{Op: store.OpPut, Path: []byte(path), Record: rec}
}

func deleteChange(path string) store.Change {
	return store.Change{Op: store.OpDelete, Path: []byte(path)}
}

func markChange(path string, gen uint64) store.Change {
	return store.Change{Op: store.OpMark, Path: []byte(path), Gen: gen}
}

// byInode returns a recorded path other than exclude with the inode, and its
// record.
func (ix *Indexer) byInode(dev, ino uint64, exclude string) (string, store.Record, bool, error) {
	paths, err := ix.st.ByInodeAll(dev, ino)
	if err != nil {
		return "", store.Record{}, false, err
	}
	for _, p := range paths {
		if string(p) == exclude {
			continue
		}
		rec, ok, err := ix.st.Get(p)
		if err != nil || !ok {
			return "", store.Record{}, false, err
		}
		return string(p), rec, true, nil
	}
	return "", store.Record{}, false, nil
}

func (ix *Indexer) putSync(ctx context.Context, path string, rec store.Record) error {
	return ix.st.Put(ctx, []byte(path), rec)
}

// deleteSubtree drops the records at and under path and reports how many
// there were.
func (ix *Indexer) deleteSubtree(ctx context.Context, path string) (int, error) {
	n := 0
	err := ix.st.Subtree(ctx, []byte(path), func([]byte, store.Record) error {
		n++
		return nil
	})
	if err != nil || n == 0 {
		return 0, err
	}
	return n, ix.st.DeleteSubtree(ctx, []byte(path))
}

// deleteBelow drops the records at and under path when there are any
// strictly under it (path was a directory), and reports how many there were.
func (ix *Indexer) deleteBelow(ctx context.Context, path string) (int, error) {
	n := 0
	err := ix.st.Subtree(ctx, []byte(path), func(p []byte, _ store.Record) error {
		if string(p) != path {
			n++
		}
		return nil
	})
	if err != nil || n == 0 {
		return 0, err
	}
	return n, ix.st.DeleteSubtree(ctx, []byte(path))
}

// sweep drops the records under the scanned directory that the scan did
// not see: older generation, not in its seen set, and not under a path it
// could not read.
func (ix *Indexer) sweep(ctx context.Context, sc *scan) (int, error) {
	return ix.st.Sweep(ctx, []byte(sc.dir), sc.gen, func(p []byte) bool {
		return sc.seen.contains(string(p)) || sc.underUnread(string(p))
	})
}

// loadGeneration returns the last generation handed out on this index.
func (ix *Indexer) loadGeneration() (uint64, error) {
	s, err := ix.st.Stats()
	if err != nil {
		return 0, err
	}
	return s.Generation, nil
}

// newGeneration allocates the generation of a new scan.
func (ix *Indexer) newGeneration() (uint64, error) {
	g, err := ix.st.NextGeneration(ix.ctx())
	if err != nil {
		return 0, err
	}
	for {
		cur := ix.scans.gen.Load()
		if g <= cur || ix.scans.gen.CompareAndSwap(cur, g) {
			return g, nil
		}
	}
}

// indexEmpty reports whether the index holds no record at all.
func (ix *Indexer) indexEmpty() bool {
	s, err := ix.st.Stats()
	return err == nil && s.Files == 0
}

// hasRecords reports whether the index holds a record at or under dir, or
// cannot tell.
func (ix *Indexer) hasRecords(dir string) bool {
	found := false
	err := ix.st.Subtree(ix.ctx(), []byte(dir), func([]byte, store.Record) error {
		found = true
		return store.ErrStop
	})
	return err != nil || found
}
