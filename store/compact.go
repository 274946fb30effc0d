package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/annexd/annexd/store/internal/indexfile"
	bolt "go.etcd.io/bbolt"
)

// compactTxSize bounds one transaction of the copy, so memory stays flat.
const compactTxSize = 64 << 20

// CompactResult says what Compact did.
type CompactResult struct {
	// Before and After are the space the index takes on disk, in bytes:
	// its allocated blocks, not its length, which runs up to 16 MiB ahead
	// of its pages as room to grow (open.go, initialMapSize).
	Before, After int64
	Files         int64 // records copied
	Replaced      bool  // the copy was renamed over the old file
}

// Compact rewrites the index at path into a new file holding only live
// pages, filled completely, and puts it in place of the old one. The
// index must not be open elsewhere: Compact holds its lock throughout, so
// it returns ErrLocked while the daemon runs. The old file is checked
// first (a damaged index is not compacted: ErrCorrupt); the copy is
// written next to it, synced and checked against the old file's counts
// before it is renamed over it, so a crash or a full disk at any point
// leaves either the old or the new index at path, never a partial one
// (the next Compact removes the copy a crash left behind). When path is a
// symlink, the file it points to is replaced, keeping its permissions and
// owner. It needs free space for a second copy of the live data. The copy
// has the page size of a new index (pageSize), whatever the old one had.
func Compact(path string, opts Options) (CompactResult, error) {
	if _, err := os.Stat(path); err != nil {
		return CompactResult{}, fmt.Errorf("%w at %s: %v", ErrNoIndex, path, err)
	}
	opts.ReadOnly, opts.noRun = false, true
	s, err := Open(path, opts)
	if err != nil {
		return CompactResult{}, err
	}
	defer s.Close()
	// The copy replaces the file, not a symlink to it.
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return CompactResult{}, fmt.Errorf("store: compact: %w", err)
	}
	indexfile.RemoveLeftovers(real, compactPattern(real))
	fi, err := os.Stat(real)
	if err != nil {
		return CompactResult{}, fmt.Errorf("store: compact: %w", err)
	}
	res := CompactResult{Before: onDisk(fi)}
	rep, err := s.Check()
	if err != nil {
		return res, err
	}
	if !rep.OK() {
		return res, fmt.Errorf("%w: %s: check found %d problems (run annexd check-db); not compacted", ErrCorrupt, path, len(rep.Problems)+rep.Omitted)
	}
	res.Files = rep.Files
	tmp, err := s.copyCompact(real, rep)
	if err != nil {
		return res, err
	}
	if err := os.Rename(tmp, real); err != nil {
		_ = os.Remove(tmp)
		return res, fmt.Errorf("store: compact %s: %w", path, err)
	}
	res.Replaced = true
	if fi, err := os.Stat(real); err == nil {
		res.After = onDisk(fi)
	}
	if err := indexfile.SyncDir(filepath.Dir(real)); err != nil {
		return res, fmt.Errorf("store: compact %s: the compacted index is in place, but syncing its directory failed: %w", path, err)
	}
	return res, nil
}

// copyCompact copies the index into a new file next to real (the index
// file, symlinks resolved), syncs it, checks that it holds what want
// counted, and returns its name.
func (s *Store) copyCompact(real string, want Report) (name string, err error) {
	name, err = indexfile.CreateBeside(real, compactPattern(real))
	if err != nil {
		return "", fmt.Errorf("store: compact %s: %w%s", s.path, err, indexfile.Hint(err))
	}
	defer func() {
		if err != nil {
			_ = os.Remove(name)
		}
	}()
	dst, err := bolt.Open(name, 0o600, &bolt.Options{NoSync: true, FreelistType: bolt.FreelistMapType, PageSize: pageSize})
	if err != nil {
		return "", fmt.Errorf("store: compact %s: %w", s.path, err)
	}
	err = bolt.Compact(dst, s.db, compactTxSize)
	if err == nil {
		err = dst.Sync()
	}
	if err == nil {
		err = checkCopy(dst, want)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("store: compact %s: %w%s", s.path, err, indexfile.Hint(err))
	}
	return name, nil
}

// checkCopy runs the consistency checks on the copy and compares its
// totals with the original's.
func checkCopy(db *bolt.DB, want Report) error {
	got := Report{}
	err := db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			got.add("bbolt: %v", err)
		}
		checkInvariantsSafely(tx, &got)
		return nil
	})
	switch {
	case err != nil:
		return err
	case !got.OK():
		return fmt.Errorf("copy fails its check: %s", got.Problems[0])
	case got.Files != want.Files || got.Dirs != want.Dirs || got.Digests != want.Digests || got.Groups != want.Groups:
		return errors.New("copy differs from the original in its counts")
	}
	return nil
}

// compactPattern is CreateTemp's pattern for the copies of a compaction.
func compactPattern(path string) string { return "." + filepath.Base(path) + ".compact-*" }

// onDisk is the space fi's file takes on disk: its allocated blocks.
func onDisk(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
