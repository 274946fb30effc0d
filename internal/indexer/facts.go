package indexer

import (
	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/store"
)

// A regular file's check gathers its facts once (gatherFile): the record
// at the path, the shelved record of its disk when there may be one, the
// ledger's word and the Rehash mark. decideFile says what they call for,
// and the checker acts (checkFile). A file without a record goes on to
// the renamer, which does the same for renames (decide).

// fileFacts is what is known of a regular file and its record.
type fileFacts struct {
	rec    store.Record  // the record at the path, with its file system's id
	ok     bool          // there is one, of the file's disk
	legacy bool          // rec was read with a device number (upgradeDev)
	other  bool          // the record at the path is another disk's: it goes on the shelf
	shelf  *store.Record // the shelved record of the file's disk, when it still describes the file
	// rehash: a caller asked for the file to be hashed (Rehash). seen:
	// the ledger saw the path or its inode written since rec was hashed,
	// or, for a record flagged corrupt, another name of the inode.
	rehash, seen bool
	settled      bool // rec still describes the file (ticks.settled)
	mayAdopt     bool // a record elsewhere may be the file's: not a walk into an empty index
	// replaced: rec is of another inode of the file's disk. The file was
	// renamed over the path (an editor's save, mv a b): its own record, if
	// any, is under its old name.
	replaced bool
}

// fileStep is what a regular file's check does.
type fileStep uint8

const (
	stepSettle   fileStep = iota // the record holds
	stepUpgrade                  // it holds, and is written back with its file system's id
	stepUnshelve                 // the shelved record of the file's disk holds: it comes back
	stepAdopt                    // no record: look for a renamed file's, else hash
	stepHash                     // hash the file
)

var stepNames = [...]string{"settle", "upgrade", "unshelve", "adopt", "hash"}

func (s fileStep) String() string { return stepNames[s] }

// decideFile says what the facts of a regular file call for. A shelved
// record that still describes the file comes back first: its disk is
// back in its place. A record holds when it is settled, no write was seen
// since it was hashed, and no caller asked for a hash. A write seen makes
// a hash even of a record that looks current: that record may have come
// from another name of the inode. A doubt of the ledger (ledger.Unsure)
// is no write: a file whose stat identity, ctime included, is its
// record's was not written since. A file without a record may be a
// renamed one, and so may a file renamed over a recorded path: its
// record there is the replaced file's.
func decideFile(f fileFacts) fileStep {
	switch {
	case f.shelf != nil:
		return stepUnshelve
	case f.ok && !f.seen && !f.rehash && f.settled:
		if f.legacy {
			return stepUpgrade
		}
		return stepSettle
	case (!f.ok || f.replaced) && f.mayAdopt:
		return stepAdopt
	}
	return stepHash
}

// prior is the file's own record as its prior record, or nil.
func (f *fileFacts) prior(path string) *prior {
	if !f.ok {
		return nil
	}
	return &prior{rec: f.rec, from: path, seen: f.seen}
}

// known is the record the ledger's word was about, or nil.
func (f *fileFacts) known() *store.Record {
	if !f.ok {
		return nil
	}
	return &f.rec
}

// gatherFile reads the facts of the regular file fi at j's path: one
// store read for its record (none when its walk found none), and one for
// its disk's shelved record when the index holds shelved records and the
// record at the path is not of the file's disk.
func (c *checker) gatherFile(j *job, fi fsstat.FileInfo) (fileFacts, error) {
	rec, ok, err := c.record(j)
	if err != nil {
		return fileFacts{}, err
	}
	f := fileFacts{rec: rec, ok: ok, mayAdopt: !j.noAdopt}
	f.legacy = ok && upgradeDev(&f.rec, fi)
	f.other = ok && c.fsys.absent(f.rec.Dev, fi.Dev)
	if (!ok || f.rec.Dev != fi.Dev) && c.st.HasShelved() {
		if f.shelf = c.shelved(j.path, fi); f.shelf != nil {
			return f, nil // it comes back: nothing else counts
		}
	}
	if f.other {
		f.rec, f.ok = store.Record{}, false // for this file there is none
	}
	f.rehash = c.pipe.pend.takeRehash(j.path, j.entry)
	f.seen = c.ledger.Since(j.path, fi.Dev, fi.Ino, f.rec.HashedAt) == ledger.Written
	if !f.seen && f.ok && f.rec.State.Flagged() {
		// A finding took the ctime it met: a write through another name
		// before it shows only at that name.
		f.seen = c.linkedSince(j.path, j.path, fi.Dev, fi.Ino, f.rec.HashedAt)
	}
	f.settled = f.ok && c.ticks.settled(&f.rec, fi)
	f.replaced = f.ok && f.rec.Dev == fi.Dev && f.rec.Ino != fi.Ino
	return f, nil
}

// shelved is the shelved record of fi's file system at path when it still
// describes the file, as a record read there would be settled, and the
// ledger saw no write since it was hashed; else nil.
func (c *checker) shelved(path string, fi fsstat.FileInfo) *store.Record {
	sh, found, err := c.st.Shelved(fi.Dev, []byte(path))
	if err != nil || !found || !c.ticks.settled(&sh, fi) ||
		c.ledger.Since(path, fi.Dev, fi.Ino, sh.HashedAt) == ledger.Written {
		return nil
	}
	return &sh
}
