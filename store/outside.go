package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// OutsideDir is one place where the index holds records outside a set of
// roots, as Outside reports it.
type OutsideDir struct {
	// Dir is the directory ("/a/b", or "/").
	Dir []byte
	// Direct is set when Dir holds a root below it: only the records
	// directly in Dir are outside (its other subdirectories with records
	// outside the roots are listed on their own). Otherwise Dir holds no
	// root and every record at or below it is outside.
	Direct bool
	// Dirs counts the directories with records that this entry covers.
	Dirs int64
	// Files counts the records it covers; -1 when they were not counted.
	Files int64
}

// Outside lists the top-most directories holding records that are not at or
// below any of roots, in path order: each directory that holds no root and
// whose parent does, and each ancestor of a root that holds records of its
// own (Direct). It reads only directory entries, skipping each root's
// subtree with one seek, so it costs about one step per directory outside
// the roots, in short read transactions. With countFiles it also counts the
// records of each entry, reading each record outside the roots once.
func (s *reader) Outside(ctx context.Context, roots [][]byte, countFiles bool) ([]OutsideDir, error) {
	prefixes, err := rootPrefixes(roots)
	if err != nil {
		return nil, err
	}
	var out []OutsideDir
	for from := []byte{'/'}; from != nil; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if from, err = s.outsideChunk(prefixes, from, &out); err != nil {
			return nil, err
		}
	}
	for i := range out {
		out[i].Files = -1
		if !countFiles {
			continue
		}
		if out[i].Files, err = s.countOutside(ctx, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rootPrefixes returns the directory-key prefixes of roots ("/a/b/"),
// sorted, without those inside another.
func rootPrefixes(roots [][]byte) ([][]byte, error) {
	var ps [][]byte
	for _, r := range roots {
		if err := checkPath(r, true); err != nil {
			return nil, fmt.Errorf("store: outside: root: %w", err)
		}
		ps = append(ps, subtreePrefix(r))
	}
	slices.SortFunc(ps, bytes.Compare)
	out := ps[:0]
	for _, p := range ps {
		if len(out) == 0 || !bytes.HasPrefix(p, out[len(out)-1]) {
			out = append(out, p)
		}
	}
	return out, nil
}

// outsideChunk reads up to chunk directory entries from the key from on,
// adding the outside ones to out. It returns where to go on, nil at the
// end.
func (s *reader) outsideChunk(prefixes [][]byte, from []byte, out *[]OutsideDir) (next []byte, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(codec.BucketDirs).Cursor()
		n := 0
		for k, _ := c.Seek(from); k != nil; n++ {
			if n == chunk {
				next = bytes.Clone(k) // not read yet
				return nil
			}
			if p := rootOf(prefixes, k); p != nil {
				k, _ = c.Seek(pastSubtree(p))
				continue
			}
			addOutside(out, prefixes, k)
			k, _ = c.Next()
		}
		return nil
	})
	return next, err
}

// rootOf returns the prefix among prefixes that dirKey is at or below, or
// nil. Since no prefix is inside another, only the greatest prefix not
// after dirKey can be it.
func rootOf(prefixes [][]byte, dirKey []byte) []byte {
	i, found := slices.BinarySearchFunc(prefixes, dirKey, bytes.Compare)
	if found {
		return prefixes[i]
	}
	if i > 0 && bytes.HasPrefix(dirKey, prefixes[i-1]) {
		return prefixes[i-1]
	}
	return nil
}

// holdsRoot reports whether some prefix starts with dirKey: the directory
// is an ancestor of a root.
func holdsRoot(prefixes [][]byte, dirKey []byte) bool {
	i, _ := slices.BinarySearchFunc(prefixes, dirKey, bytes.Compare)
	return i < len(prefixes) && bytes.HasPrefix(prefixes[i], dirKey)
}

// pastSubtree is the least key after every key starting with the prefix
// "/a/b/": "/a/b0".
func pastSubtree(prefix []byte) []byte {
	p := bytes.Clone(prefix)
	p[len(p)-1]++ // '/' + 1
	return p
}

// addOutside counts the outside directory dirKey into its entry: the
// shallowest ancestor (or itself) that holds no root, or dirKey itself as a
// Direct entry. Keys arrive in order, so an entry's directories are
// contiguous and extend the last entry.
func addOutside(out *[]OutsideDir, prefixes [][]byte, dirKey []byte) {
	if n := len(*out); n > 0 {
		last := &(*out)[n-1]
		if !last.Direct && bytes.HasPrefix(dirKey, subtreePrefix(last.Dir)) {
			last.Dirs++
			return
		}
	}
	top := dirKey
	direct := true
	for i := 0; i < len(dirKey); i++ {
		if dirKey[i] != '/' {
			continue
		}
		if a := dirKey[:i+1]; !holdsRoot(prefixes, a) {
			top, direct = a, false
			break
		}
	}
	*out = append(*out, OutsideDir{Dir: dirPath(top), Direct: direct, Dirs: 1})
}

// dirPath turns a directory key into a path: "/a/b/" → "/a/b", "/" → "/".
func dirPath(dirKey []byte) []byte {
	if len(dirKey) == 1 {
		return []byte{'/'}
	}
	return bytes.Clone(dirKey[:len(dirKey)-1])
}

// countOutside counts the records an entry covers.
func (s *reader) countOutside(ctx context.Context, d *OutsideDir) (int64, error) {
	var n int64
	count := func([]byte, Record) error { n++; return nil }
	var err error
	if d.Direct {
		err = s.Direct(ctx, d.Dir, count)
	} else {
		err = s.Subtree(ctx, d.Dir, count)
	}
	return n, err
}

// Direct calls fn for each record directly in the directory dir (not in its
// subdirectories), outside of read transactions. It reads past them only
// to the first record of a subdirectory, however large the subtree. fn may
// return ErrStop.
func (s *reader) Direct(ctx context.Context, dir []byte, fn func(path []byte, r Record) error) error {
	if err := checkPath(dir, true); err != nil {
		return err
	}
	want := subtreePrefix(dir)
	errPast := errors.New("past the directory")
	err := s.Subtree(ctx, dir, func(p []byte, r Record) error {
		if dk, _ := splitPath(p); !bytes.Equal(dk, want) {
			if len(p) == len(dir) {
				return nil // dir itself as a file
			}
			return errPast
		}
		return fn(p, r)
	})
	if errors.Is(err, errPast) || errors.Is(err, ErrStop) {
		return nil
	}
	return err
}

// Forget drops the records at or below dir that are outside every root, and
// reports how many there were; dry only counts them. Where dir holds roots,
// their subtrees are left alone: whole directories outside them go, and
// the own files of the directories on the way to a root.
func (s *Store) Forget(ctx context.Context, dir []byte, roots [][]byte, dry bool) (int64, error) {
	if err := checkPath(dir, true); err != nil {
		return 0, err
	}
	holds := false
	for _, r := range roots {
		holds = holds || bytes.Equal(r, dir) || bytes.HasPrefix(r, subtreePrefix(dir))
	}
	if !holds {
		return s.forgetSubtree(ctx, dir, dry)
	}
	places, err := s.Outside(ctx, roots, false)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, d := range places {
		if !bytes.Equal(d.Dir, dir) && !bytes.HasPrefix(d.Dir, subtreePrefix(dir)) {
			continue
		}
		var m int64
		if d.Direct {
			m, err = s.forgetDirect(ctx, d.Dir, dry)
		} else {
			m, err = s.forgetSubtree(ctx, d.Dir, dry)
		}
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// forgetSubtree drops everything at or below dir.
func (s *Store) forgetSubtree(ctx context.Context, dir []byte, dry bool) (int64, error) {
	var n int64
	err := s.Subtree(ctx, dir, func([]byte, Record) error { n++; return nil })
	if err != nil || dry || n == 0 {
		return n, err
	}
	return n, s.DeleteSubtree(ctx, dir)
}

// forgetDirect drops the records directly in dir.
func (s *Store) forgetDirect(ctx context.Context, dir []byte, dry bool) (int64, error) {
	var cs []Change
	err := s.Direct(ctx, dir, func(p []byte, _ Record) error {
		cs = append(cs, Change{Op: OpDelete, Path: p})
		return nil
	})
	if err != nil || dry {
		return int64(len(cs)), err
	}
	return int64(len(cs)), s.SubmitAll(ctx, cs)
}
