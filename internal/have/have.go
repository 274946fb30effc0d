package have

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// Index is what have reads of the index.
type Index interface {
	ByDigest(b key.Backend, digest []byte) ([][]byte, error)
	Get(path []byte) (store.Record, bool, error)
}

// Files tells what a record's file is now.
type Files interface {
	// Unchanged reports whether a fresh lstat of path agrees with rec.
	Unchanged(path string, rec *store.Record) bool
	// Absent reports whether file system dev is not mounted where path
	// is, and what the index remembers of it.
	Absent(path string, dev uint64) (api.RememberedFS, bool)
	// Outside reports whether path is outside the roots.
	Outside(path []byte) bool
}

// Finder finds the copies of a content.
type Finder struct {
	backend key.Backend
	idx     Index
	files   Files
}

// New returns a Finder over an index of backend b's digests.
func New(b key.Backend, idx Index, files Files) *Finder {
	return &Finder{backend: b, idx: idx, files: files}
}

// Backend is the backend the index hashes with.
func (f *Finder) Backend() key.Backend { return f.backend }

// Have returns the files with k's content, in path order. k must carry
// its size; a record of the same digest with another size is not a copy.
func (f *Finder) Have(ctx context.Context, k key.Key) ([]api.HaveCopy, error) {
	digest, err := k.Digest()
	if err != nil {
		return nil, fmt.Errorf("have: %w", err)
	}
	size, ok := k.Size()
	if !ok {
		return nil, fmt.Errorf("have: %s has no size", k)
	}
	paths, err := f.idx.ByDigest(k.Backend(), digest)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(paths, bytes.Compare)
	var out []api.HaveCopy
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rec, ok, err := f.idx.Get(p)
		if err != nil {
			return nil, err
		}
		if !ok || !rec.HasDigest() || rec.Size != size || !bytes.Equal(rec.Digest, digest) {
			continue // changed since ByDigest read it, or other content
		}
		out = append(out, f.copyOf(p, &rec))
	}
	return out, nil
}

// copyOf marks one copy: absent when its file system is away, else stale
// when its file changed.
func (f *Finder) copyOf(p []byte, rec *store.Record) api.HaveCopy {
	c := api.HaveCopy{Path: p, OutsideRoots: f.files.Outside(p)}
	if fs, away := f.files.Absent(string(p), rec.Dev); away {
		c.Absent = &fs
		return c
	}
	c.Stale = !f.files.Unchanged(string(p), rec)
	return c
}
