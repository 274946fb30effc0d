package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
	"github.com/annexd/annexd/store/internal/pagecheck"
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
			if err := tx.Bucket(codec.BucketUser).Put([]byte(k), values[k]); err != nil {
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
	x, err := pagecheck.OpenRaw(f)
	if err != nil {
		return nil, nil
	}
	meta, ok, err := x.Values(codec.BucketMeta, []string{string(codec.MetaFormat)})
	if err == nil && (!ok || string(meta[string(codec.MetaFormat)]) != formatID) {
		return nil, fmt.Errorf("%w: %s is a bbolt database of another program (left untouched)", ErrNotIndex, path)
	}
	user, _, _ := x.Values(codec.BucketUser, keep)
	return user, nil
}
