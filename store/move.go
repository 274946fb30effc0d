package store

import (
	"bytes"
	"context"
	"fmt"

	"github.com/annexd/annexd/store/codec"
)

// Moves never delete a record. A move merges: where the target path holds a
// record already, that record wins and the source's stays where it was,
// for the caller to drop or keep. A check and the change it guards are one
// transaction, applied in order with every change submitted before it, so
// a record written meanwhile is never lost.

// Moved is what Move did.
type Moved struct {
	Moved int // records now under the new path
	Left  int // records left at the old path: the new one held a record there
}

// Move moves the record at oldPath, and every record below it, to the same
// place under newPath, keeping their digests. Records already at or below
// newPath stay; where one is in the way, the moved record stays under
// oldPath (Moved.Left counts them). ErrNotFound when nothing is at or below
// oldPath.
func (s *Store) Move(ctx context.Context, oldPath, newPath []byte) (Moved, error) {
	var m Moved
	err := s.wait(ctx, item{c: Change{Op: OpMove, Path: oldPath, NewPath: newPath}, moved: &m})
	return m, err
}

// Adoption gives a path the record of another, checked in the transaction
// that makes the change.
type Adoption struct {
	From []byte // the path whose record is taken
	To   []byte // the path that gets it; From itself updates From in place
	// Was is From's record as the caller read it: the change is made only
	// while From holds a record of the same hash (identity and HashedAt).
	Was Record
	// ToWas is To's record as the caller read it, nil when it had none.
	ToWas *Record
	// Record is what To gets: Was with To's identity, say.
	Record Record
	// Keep leaves From's record in place: a hard link, both names stay.
	Keep bool
}

// Adopt stores a.Record at a.To and, unless a.Keep, removes the record at
// a.From, in one transaction and only when both paths still hold what the
// caller read. Otherwise nothing changes and the error is a *ConflictError
// (errors.Is ErrConflict) naming the path that changed.
func (s *Store) Adopt(ctx context.Context, a Adoption) error {
	if err := checkPath(a.From, false); err != nil {
		return err
	}
	return s.wait(ctx, item{c: Change{Op: opAdopt, Path: a.To, Record: a.Record}, adopt: &a})
}

// move applies a Move.
func (w *wtx) move(oldPath, newPath []byte) (Moved, error) {
	var m Moved
	fk, r, isFile, err := w.lookup(oldPath)
	if err != nil {
		return m, err
	}
	dirs := w.subtreeDirs(oldPath)
	if !isFile && len(dirs) == 0 {
		return m, changeError{fmt.Errorf("%w: %q", ErrNotFound, oldPath)}
	}
	if bytes.Equal(oldPath, newPath) {
		return m, nil
	}
	if isFile {
		if err := w.moveFile(fk, &r, newPath, &m); err != nil {
			return m, err
		}
	}
	oldP, newP := subtreePrefix(oldPath), subtreePrefix(newPath)
	for _, dk := range dirs {
		nk := append(bytes.Clone(newP), dk[len(oldP):]...)
		if w.dirID(nk) == 0 {
			err = w.moveDir(dk, nk, &m)
		} else {
			err = w.mergeDir(dk, nk, &m)
		}
		if err != nil {
			return m, err
		}
	}
	return m, nil
}

// moveFile moves the record fk (r) to path unless path holds one.
func (w *wtx) moveFile(fk []byte, r *Record, path []byte, m *Moved) error {
	_, _, taken, err := w.lookup(path)
	if err != nil || taken {
		m.Left++
		return err
	}
	if err := w.removeKey(fk, r); err != nil {
		return err
	}
	m.Moved++
	return w.put(path, r)
}

// moveDir gives the directory dk the key nk, which holds no records: its
// id stays, so its records are not rewritten.
func (w *wtx) moveDir(dk, nk []byte, m *Moved) error {
	v := bytes.Clone(w.dirs.Get(dk))
	id, _ := codec.ParseIDKey(v)
	m.Moved += len(w.dirFiles(id))
	if err := w.logMovedDir(v, dk, nk); err != nil {
		return err
	}
	if err := w.feedMovedDir(v, dk, nk); err != nil {
		return err
	}
	w.forgetDir(dk)
	w.forgetDir(nk)
	if err := w.dirs.Delete(dk); err != nil {
		return err
	}
	if err := w.dirs.Put(nk, v); err != nil {
		return err
	}
	return w.tails[1].put(v, nk)
}

// mergeDir moves the records of directory dk into nk, which holds records
// already: a name nk holds keeps its record, and dk's stays.
func (w *wtx) mergeDir(dk, nk []byte, m *Moved) error {
	from, to := w.dirID(dk), w.dirID(nk)
	for _, fk := range w.dirFiles(from) {
		_, base, _ := codec.SplitFileKey(fk)
		if w.files.Get(codec.FileKey(nil, to, base)) != nil {
			m.Left++
			continue
		}
		r, err := codec.DecodeRecord(w.files.Get(fk))
		if err != nil {
			return fmt.Errorf("move %q: %w", dk, err)
		}
		if err := w.unindex(fk, &r); err != nil {
			return err
		}
		if err := w.files.Delete(fk); err != nil {
			return err
		}
		if err := w.put(joinPath(nk, base), &r); err != nil {
			return err
		}
		m.Moved++
	}
	return w.dropDirIfEmpty(from, dk)
}

// dirFiles lists the file keys of the directory with id.
func (w *wtx) dirFiles(id uint64) [][]byte {
	p := codec.IDKey(id)
	var keys [][]byte
	c := w.files.Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	return keys
}

// adopt applies an Adopt.
func (w *wtx) adopt(a *Adoption) error {
	fk, cur, ok, err := w.lookup(a.From)
	if err != nil {
		return err
	}
	if !ok || !cur.SameHash(&a.Was) {
		return changeError{&ConflictError{Path: bytes.Clone(a.From), Found: ok}}
	}
	if !bytes.Equal(a.From, a.To) {
		_, to, found, err := w.lookup(a.To)
		if err != nil {
			return err
		}
		if found != (a.ToWas != nil) || (found && !to.SameHash(a.ToWas)) {
			return changeError{&ConflictError{Path: bytes.Clone(a.To), Found: found}}
		}
		if !a.Keep {
			if err := w.removeKey(fk, &cur); err != nil {
				return err
			}
		}
	}
	return w.put(a.To, &a.Record)
}
