package indexer

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/store"
)

// Renames and hard links: a file without a record may be one that was
// renamed, or another name of an inode the index knows. Its check gathers
// the facts once (renameFacts), decide says what they allow, and the
// renamer acts through the store's checked moves, so no lock is needed: a
// record that changed since it was read makes the move fail, and the
// facts are gathered again.

// hereState says what the index holds at the path being checked.
type hereState uint8

const (
	hereNone    hereState = iota // nothing with the file's inode
	hereCurrent                  // the file's record, not racily clean: a directory move brought it
	hereOther                    // a record of the inode that is not the file's now
)

// oldState says what the old path of a candidate record holds now.
type oldState uint8

const (
	oldGone  oldState = iota // nothing: the file was renamed away from it
	oldSame                  // the same inode: a hard link
	oldOther                 // something else, or it cannot be told
)

// renameFacts is what is known about a file without a record and the
// record that may be its own: the one kept for its inode under another
// path.
type renameFacts struct {
	file  store.Identity // the file as lstat sees it now
	nlink uint64
	here  hereState
	found bool         // a record of the inode under another path
	old   string       // that path
	rec   store.Record // its record
	racy  bool         // rec is racily clean
	// bornAfter: the file was born after rec's ctime, a new file in a
	// reused inode (where the file system keeps birth times).
	bornAfter bool
	// seen: the ledger saw a write to either path or to the inode since
	// rec was hashed. unsure: it saw none but cannot rule one out, or a
	// write may not have reached it yet.
	seen, unsure bool
	// linkBusy: another recorded name of the inode is in the pipeline,
	// so its record may predate a change being checked.
	linkBusy bool
	// displaced: rec is no record of the index but a displaced one
	// (displaced.go), kept then (Unix ns): the index holds no name of
	// the inode.
	displaced int64
	oldNow    oldState
	oldCtime  int64 // the inode's ctime, when oldNow is oldSame
	// dirMovable: only the parent directory changed, the old one is gone
	// and is no root, and the new one is under a root.
	dirMovable bool
}

// verdict is what a file without a record gets.
type verdict uint8

const (
	hashIt     verdict = iota // no record can be trusted: hash the file
	keepHere                  // the record already at the path is the file's
	takeLink                  // copy the other name's record; both names keep one
	takeRename                // move the old path's record to the new one
	moveDir                   // move the old directory's records, this one among them
)

var verdictNames = [...]string{"hash", "keep", "link", "rename", "move directory"}

func (v verdict) String() string { return verdictNames[v] }

// decide says what the facts allow. A rename changes ctime, so a record is
// taken for a file whose ctime changed only when nothing saw the file
// written since the record was hashed, nor can rule it out; a file whose
// ctime is the record's moved with its directory. A record flagged by an
// audit (corrupt, unreadable) claims no key for the bytes, so a doubt
// does not keep it from following its file: its finding moves along.
// Hard links share one ctime: a name takes another's record only when
// that record's ctime is the inode's ctime now, and a renamed file with
// other names is hashed; a flagged record is never copied to another
// name, which is hashed and held against it instead (judge).
func decide(f renameFacts) verdict {
	switch f.here {
	case hereCurrent:
		return keepHere
	case hereOther:
		return hashIt
	}
	if !f.fits() || f.displaced != 0 {
		// A displaced record is at no path to take it from: the file is
		// hashed, held against it.
		return hashIt
	}
	r := &f.rec
	moved := r.CtimeNs == f.file.CtimeNs
	flagged := r.State != store.StateOK
	if (!moved && (f.seen || (f.unsure && !flagged))) || f.linkBusy {
		return hashIt
	}
	switch f.oldNow {
	case oldSame:
		if r.CtimeNs != f.oldCtime || flagged {
			return hashIt // a write through any name may postdate the record
		}
		return takeLink
	case oldOther:
		return hashIt
	}
	switch {
	case !moved && f.nlink > 1:
		return hashIt // renamed with other names: a write through one shows nowhere
	case moved && f.dirMovable:
		return moveDir
	}
	return takeRename
}

// fits reports whether the record found could be the file's: of the same
// size and mtime, not older than the file itself, and either in state ok
// and not racily clean, or flagged with the key it keeps.
func (f *renameFacts) fits() bool {
	r := &f.rec
	if !f.found || r.Size != f.file.Size || r.MtimeNs != f.file.MtimeNs || f.bornAfter {
		return false
	}
	switch r.State {
	case store.StateOK:
		return !f.racy
	case store.StateCorrupt, store.StateUntraced, store.StateUnreadable:
		return r.HasDigest()
	}
	return false
}

// prior is the record found as the file's prior record, held against the
// file once it is hashed (judge), or nil: one of its inode, not of a new
// file in a reused inode.
func (f *renameFacts) prior() *prior {
	if !f.found || f.bornAfter {
		return nil
	}
	return &prior{rec: f.rec, from: f.old, seen: f.seen}
}

// renamer gathers the facts of renames and hard links and acts on them.
type renamer struct {
	st       *store.Store
	pipe     *pipeline
	paths    *pathRules
	ticks    *ticks
	ledger   Ledger
	unread   unreadWrites
	scans    *scanner
	removals *removals // drop what is left at a path once it is gone
	// displaced holds the flagged records whose paths other inodes took.
	displaced *displaced
	log       *slog.Logger
}

// adopt gives the file fi at path, which has no record, the record of the
// file it was renamed from or of another name of its inode, when the facts
// allow it. walked says a walk queued path and sweeps its directory. It
// reports whether path now has its record; when not, the record of its
// inode found elsewhere, if any, is returned as its prior record. here
// is the record at path of another inode, which a rename replaces, or nil.
func (r *renamer) adopt(ctx context.Context, path string, fi fsstat.FileInfo, here *store.Record, walked bool) (bool, *prior) {
	var f renameFacts
	for range 2 { // a conflict means the index moved on: look again, once
		var err error
		f, err = r.gather(path, fi)
		if err != nil {
			r.log.Error("cannot read index", "path", path, "err", err)
			return false, nil
		}
		v := decide(f)
		if r.log.Enabled(ctx, slog.LevelDebug) {
			r.log.Debug("renamer decided", "path", path, "verdict", v.String(), "found", f.found, "old", f.old,
				"state", f.rec.State.String(), "displaced", f.displaced != 0, "born_after", f.bornAfter)
		}
		ok, err := r.act(ctx, v, path, &f, here, walked)
		if !errors.Is(err, store.ErrConflict) {
			if err != nil {
				r.log.Warn("cannot move record of renamed file", "from", f.old, "to", path, "err", err)
			}
			if ok {
				return true, nil
			}
			return false, f.prior()
		}
	}
	return false, f.prior()
}

// priorOf is the prior record of the file fi at path, which has no
// record: its inode's under another name, or nil.
func (r *renamer) priorOf(path string, fi fsstat.FileInfo) *prior {
	f, err := r.gather(path, fi)
	if err != nil {
		return nil
	}
	return f.prior()
}

// gather reads what decide needs: two or three reads of the index, three
// stat calls at most.
func (r *renamer) gather(path string, fi fsstat.FileInfo) (renameFacts, error) {
	f := renameFacts{file: identity(fi), nlink: fi.Nlink}
	names, err := r.st.ByInodeAll(fi.Dev, fi.Ino)
	if err == nil {
		err = r.gatherNames(&f, path, names)
	}
	if err == nil && !f.found && f.here == hereNone {
		r.gatherDisplaced(&f)
	}
	if err != nil || !f.found {
		return f, err
	}
	f.racy = r.ticks.racy(&f.rec)
	f.bornAfter = fsstat.BornAfter(path, fi.Ino, f.rec.CtimeNs)
	// A write the ledger may not know of yet is a doubt: the file is
	// hashed rather than trusted.
	f.unsure = r.unread.may(fi.CtimeNs)
	for _, p := range [2]string{path, f.old} {
		switch r.ledger.Since(p, fi.Dev, fi.Ino, f.rec.HashedAt) {
		case ledger.Written:
			f.seen = true
		case ledger.Unsure:
			f.unsure = true
		}
	}
	r.gatherOld(&f, path)
	return f, nil
}

// gatherNames reads the records of the inode's recorded names: the one at
// path, if any, and the first of the others.
func (r *renamer) gatherNames(f *renameFacts, path string, names [][]byte) error {
	for _, p := range names {
		q := string(p)
		if q == path {
			rec, ok, err := r.st.Get(p)
			if err != nil {
				return err
			}
			f.here = hereOther
			if ok && rec.Identity() == f.file && !r.ticks.racy(&rec) {
				f.here = hereCurrent
			}
			continue
		}
		f.linkBusy = f.linkBusy || r.pipe.pend.has(q)
		if f.old != "" {
			continue
		}
		f.old = q
		var err error
		if f.rec, f.found, err = r.st.Get(p); err != nil {
			return err
		}
	}
	return nil
}

// gatherDisplaced takes the displaced record of the file's inode, if it
// has one, as the record found: kept at another path, or at this one
// before the file came back to it.
func (r *renamer) gatherDisplaced(f *renameFacts) {
	dr, ok := r.displaced.get(f.file.Dev, f.file.Ino, time.Now().UnixNano())
	if !ok {
		return
	}
	f.found, f.old, f.rec, f.displaced = true, dr.path, dr.rec, dr.madeAt
}

// gatherOld looks at what the old path and its directory hold now.
func (r *renamer) gatherOld(f *renameFacts, path string) {
	switch cur, err := fsstat.Lstat(f.old); {
	case err == nil && cur.Dev == f.file.Dev && cur.Ino == f.file.Ino:
		f.oldNow, f.oldCtime = oldSame, cur.CtimeNs
	case err == nil || !isGone(err):
		f.oldNow = oldOther
	}
	if from, to := renamedDirs(f.old, path); from != "" {
		_, err := fsstat.Lstat(from)
		f.dirMovable = isGone(err) && !r.paths.roots.IsRoot(from) && r.paths.roots.Contains(to)
	}
}

// act carries a verdict out through the store; an error that is
// store.ErrConflict means the facts are out of date.
func (r *renamer) act(ctx context.Context, v verdict, path string, f *renameFacts, here *store.Record, walked bool) (bool, error) {
	adopted := f.rec
	adopted.SetIdentity(f.file)
	adopted.Generation = r.scans.generation()
	a := store.Adoption{From: []byte(f.old), To: []byte(path), Was: f.rec, ToWas: here, Record: adopted}
	switch v {
	case keepHere:
		return true, nil
	case takeLink:
		a.Keep = true
	case takeRename:
	case moveDir:
		return r.moveDir(ctx, path, f, walked)
	default:
		return false, nil
	}
	if err := r.st.Adopt(ctx, a); err != nil {
		return false, err
	}
	return true, nil
}

// moveDir moves the records of the file's old directory to its new one,
// merging with what is there, and reports whether path got its record.
func (r *renamer) moveDir(ctx context.Context, path string, f *renameFacts, walked bool) (bool, error) {
	from, to := renamedDirs(f.old, path)
	m, err := r.st.Move(ctx, []byte(from), []byte(to))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	r.log.Debug("directory renamed; records moved", "from", from, "to", to, "moved", m.Moved, "left", m.Left)
	if m.Left > 0 {
		r.removals.later(ctx, r.pipe, from) // records the new name held already: those left behind are stale
	}
	if !walked {
		// The old directory may be gone after its files were moved out
		// one by one and the rest deleted: the records of those came
		// along. A walk of the new one drops them (a walk that queued
		// path sweeps them itself).
		r.scans.request(to)
	}
	cur, ok, err := r.st.Get([]byte(path))
	if err != nil {
		return false, err
	}
	if !ok || cur.Identity() != f.rec.Identity() || cur.HashedAt != f.rec.HashedAt {
		return false, &store.ConflictError{Path: []byte(path), Found: ok}
	}
	return true, nil
}

// recheckLinks queues the other recorded names of the inode that path had
// when it was recorded (rec, if not nil), and of the inode it has now (fi,
// if not nil) if that has other names: a write through one hard link comes
// as an event for that name alone, and the others' records would keep the
// old digest. Their checks ask the ledger about path too (addVia), which
// may be gone by then. The path being checked stays in the pipeline until
// they are queued, so no rename takes their records meanwhile (linkBusy).
func (r *renamer) recheckLinks(path string, rec *store.Record, fi *fsstat.FileInfo) {
	for _, id := range linkInodes(rec, fi) {
		paths, err := r.st.ByInodeAll(id.dev, id.ino)
		if err != nil {
			r.log.Error("cannot read index", "path", path, "err", err)
			continue
		}
		for _, p := range paths {
			// Records outside the roots (kept from an older
			// configuration) or ignored are left alone.
			if q := string(p); q != path && !r.paths.skip(q) && r.pipe.pend.addVia(q, path) {
				r.pipe.push(job{path: q})
			}
		}
	}
}

type inode struct{ dev, ino uint64 }

// linkInodes lists the inode of rec and, when it has other names and is
// another, the inode of fi.
func linkInodes(rec *store.Record, fi *fsstat.FileInfo) []inode {
	var ids []inode
	if rec != nil {
		ids = append(ids, inode{rec.Dev, rec.Ino})
	}
	if fi != nil && fi.Nlink > 1 && (len(ids) == 0 || ids[0] != inode{fi.Dev, fi.Ino}) {
		ids = append(ids, inode{fi.Dev, fi.Ino})
	}
	return ids
}

// recheckGone is recheckLinks for a path that is gone, if the ledger saw it
// written: the write reached its other names too.
func (r *renamer) recheckGone(path string) {
	if r.ledger.Since(path, 0, 0, 0) == ledger.NotWritten {
		return
	}
	rec, ok, err := r.st.Get([]byte(path))
	if err == nil && ok {
		r.recheckLinks(path, &rec, nil)
	}
}

// renamedDirs returns the parent directories of a file's old and new path
// when only the directory changed ("/a/x/f" → "/b/y/f": "/a/x", "/b/y"), or
// "" when the file itself was renamed.
func renamedDirs(oldPath, newPath string) (from, to string) {
	if filepath.Base(oldPath) != filepath.Base(newPath) {
		return "", ""
	}
	from, to = filepath.Dir(oldPath), filepath.Dir(newPath)
	if from == to {
		return "", ""
	}
	return from, to
}
