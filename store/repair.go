package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Aside is what MoveAside did.
type Aside struct {
	// Path is where the old index is now; empty when there was none.
	Path string
	// Kept names the user meta values copied into the new index.
	Kept []string
}

// MoveAside renames the index at path to a new name beside it and creates
// an empty index at path. It never deletes or writes the old file. The
// user meta values named in keep are copied into the new index when the
// old file still yields them; they are read page by page, without bbolt,
// so damage anywhere else does not stop them. MoveAside refuses a file
// that is not an index (ErrNotIndex) and an index another process holds
// (ErrLocked).
func MoveAside(path string, keep []string) (Aside, error) {
	var a Aside
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return a, create(path, Options{})
	case err != nil:
		return a, fmt.Errorf("store: move aside: %w", err)
	case !fi.Mode().IsRegular():
		return a, fmt.Errorf("%w: %s is not a regular file", ErrNotIndex, path)
	}
	if err := checkHeader(path, fi.Size()); errors.Is(err, ErrNotIndex) {
		return a, err
	}
	values, err := salvage(path, keep)
	if err != nil {
		return a, err
	}
	f, err := os.Open(path)
	if err != nil {
		return a, fmt.Errorf("store: move aside: %w", err)
	}
	defer f.Close()
	// bbolt locks the file itself with flock; holding the lock while the
	// file is renamed keeps a daemon from opening it meanwhile.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return a, fmt.Errorf("%w: another annexd holds %s: stop it first", ErrLocked, path)
	}
	if a.Path, err = renameAside(path); err != nil {
		return a, err
	}
	if err := create(path, Options{}); err != nil {
		return a, err
	}
	a.Kept, err = putUser(path, keep, values)
	return a, err
}

// renameAside renames path to path.damaged-TIME (with -N added if taken)
// in the same directory and syncs the directory.
func renameAside(path string) (string, error) {
	stamp := path + ".damaged-" + time.Now().UTC().Format("20060102T150405Z")
	to := stamp
	for i := 2; ; i++ {
		if _, err := os.Lstat(to); errors.Is(err, fs.ErrNotExist) {
			break
		}
		to = fmt.Sprintf("%s-%d", stamp, i)
	}
	if err := os.Rename(path, to); err != nil {
		return "", fmt.Errorf("store: move %s aside: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return to, nil
}

// putUser stores values in the user bucket of the new index at path, in
// the order of keep, and returns the names stored.
func putUser(path string, keep []string, values map[string][]byte) ([]string, error) {
	var kept []string
	for _, k := range keep {
		if _, ok := values[k]; ok {
			kept = append(kept, k)
		}
	}
	if len(kept) == 0 {
		return nil, nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("store: new index %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, k := range kept {
			if err := tx.Bucket(bucketUser).Put([]byte(k), values[k]); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("store: new index %s: %w", path, err)
	}
	return kept, nil
}

// rawIndex reads an index file page by page with pread, never through
// bbolt: a damaged page is met only when it is read, and is an error then.
type rawIndex struct {
	r    *pageReader
	root uint64 // the root bucket's page
}

func openRaw(f *os.File) (*rawIndex, error) {
	m, ps, err := readMetas(f)
	if err != nil {
		return nil, err
	}
	return &rawIndex{r: &pageReader{f: f, ps: ps, hwm: m.pgid}, root: m.root}, nil
}

// values returns the values of bucket named in want. ok is false when the
// bucket is not there; err when a page on the way did not read or decode.
func (x *rawIndex) values(bucket []byte, want []string) (out map[string][]byte, ok bool, err error) {
	var head []byte
	err = x.r.leaves(x.root, 0, func(e elem) {
		if e.flags&elemBucket != 0 && bytes.Equal(e.key, bucket) {
			head = bytes.Clone(e.value)
		}
	})
	if err != nil || head == nil {
		return nil, false, err
	}
	out = map[string][]byte{}
	collect := func(e elem) {
		if e.flags&elemBucket == 0 && slices.Contains(want, string(e.key)) {
			out[string(e.key)] = bytes.Clone(e.value)
		}
	}
	if len(head) < inBucketSize {
		return nil, true, fmt.Errorf("bucket %q: bad header", bucket)
	}
	if root := binary.LittleEndian.Uint64(head); root != 0 {
		return out, true, x.r.leaves(root, 0, collect)
	}
	inline := head[inBucketSize:] // an inline bucket: one leaf page
	if len(inline) < pageHeader {
		return nil, true, fmt.Errorf("bucket %q: bad inline page", bucket)
	}
	p := parseHeader(inline)
	es, err := p.elems()
	for _, e := range es {
		collect(e)
	}
	return out, true, err
}

// salvage reads the user values named in keep from the index file at
// path, page by page, so damage elsewhere is never met. It reports
// ErrNotIndex when the file's readable root bucket shows another
// program's database. A value it cannot reach is left out.
func salvage(path string, keep []string) (map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	x, err := openRaw(f)
	if err != nil {
		return nil, nil
	}
	meta, ok, err := x.values(bucketMeta, []string{string(metaFormat)})
	if err == nil && (!ok || string(meta[string(metaFormat)]) != formatID) {
		return nil, fmt.Errorf("%w: %s is a bbolt database of another program (left untouched)", ErrNotIndex, path)
	}
	user, _, _ := x.values(bucketUser, keep)
	return user, nil
}

// leaves calls fn for every leaf element of the tree at page id, as far
// as its pages read and decode.
func (r *pageReader) leaves(id uint64, depth int, fn func(elem)) error {
	if depth > 32 {
		return errors.New("tree too deep")
	}
	p, err := r.page(id)
	if err != nil {
		return err
	}
	es, err := p.elems()
	if err != nil {
		return err
	}
	for _, e := range es {
		if p.flags == pageLeaf {
			fn(e)
		} else if err := r.leaves(e.child, depth+1, fn); err != nil {
			return err
		}
	}
	return nil
}
