package indexer

import (
	"context"
	"errors"
	"sync"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/store"
)

// RootAway reports whether the file system that held root is not mounted
// now, with the folder beneath its mount point in its place (annexd
// started while the disk was away, which the mount table alone cannot
// tell), and what the index remembers of it. It is: a file system the
// index remembers mounted at or above root, another disk than the one
// at root now, whose mount point is below the mount that holds root now,
// and that has records under root. The answer is kept until the mount
// that holds root changes.
func (ix *Indexer) RootAway(ctx context.Context, root string) (FileSystem, bool) {
	fi, err := fsstat.Lstat(root)
	if err != nil || !fi.IsDir() {
		return FileSystem{}, false // the watcher says the root is gone
	}
	hold, ok := holding(root)
	if !ok {
		return FileSystem{}, false
	}
	known, _ := ix.fsys.list()
	for _, fs := range known {
		if fs.Point == "" || !roots.Within(root, fs.Point) || len(fs.Point) <= len(hold.Point) ||
			!ix.fsys.absent(fs.ID, fi.Dev) {
			continue
		}
		if ix.rootAway.has(ctx, ix, root, hold, fs.ID) {
			return fs, true
		}
	}
	return FileSystem{}, false
}

// holding returns the mount that holds path: the last one in the table
// whose mount point is path or above it.
func holding(path string) (fsstat.Mount, bool) {
	mounts, err := fsstat.Mounts()
	if err != nil {
		return fsstat.Mount{}, false
	}
	var best fsstat.Mount
	found := false
	for _, m := range mounts {
		if roots.Within(path, m.Point) && (!found || len(m.Point) >= len(best.Point)) {
			best, found = m, true
		}
	}
	return best, found
}

// awayCache keeps RootAway's look for records, by root, mount and file
// system: a status asks often, and the records of a file system that is
// not mounted do not come while it is away.
type awayCache struct {
	mu   sync.Mutex
	seen map[awayAsk]bool
}

type awayAsk struct {
	root  string
	mount int
	dev   uint64
	fs    uint64
}

var errFound = errors.New("found")

// has reports whether file system id has a record under root, as last
// seen with the mount hold holding root.
func (c *awayCache) has(ctx context.Context, ix *Indexer, root string, hold fsstat.Mount, id uint64) bool {
	ask := awayAsk{root, hold.ID, hold.Dev, id}
	c.mu.Lock()
	v, ok := c.seen[ask]
	c.mu.Unlock()
	if ok {
		return v
	}
	err := ix.st.Subtree(ctx, []byte(root), func(_ []byte, r store.Record) error {
		if r.Dev == id {
			return errFound
		}
		return nil
	})
	found := errors.Is(err, errFound)
	if err != nil && !found {
		return false // asked again next time
	}
	c.mu.Lock()
	if c.seen == nil || len(c.seen) > 64 {
		c.seen = map[awayAsk]bool{}
	}
	c.seen[ask] = found
	c.mu.Unlock()
	return found
}
