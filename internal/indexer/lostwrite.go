package indexer

import (
	"bytes"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
)

// LostWriteFunc hears of a lost write (Options.OnLostWrite): was is the
// record hashed before an unclean end, now the one of the bytes on disk.
type LostWriteFunc func(path string, was, now store.Record)

// suspect returns rec when hashing fi again could reveal a lost write: an
// ok record hashed just before an unclean end (store.Trusted), with fi's
// stat identity, not racily clean by its timestamps, and no write seen
// since. Else nil: a new digest is then an ordinary edit.
func (c *checker) suspect(rec *store.Record, fi fsstat.FileInfo, written bool) *store.Record {
	if written || rec.State != store.StateOK || !sameFile(rec, fi) ||
		store.Trusted(rec, c.ticks.suspect) || c.ticks.racyTick(rec) {
		return nil
	}
	was := *rec
	was.Dev = fi.Dev // an older record's device number named this file system
	return &was
}

// suspectOf is suspect for a path whose record has not been read yet.
func (c *checker) suspectOf(path string, fi fsstat.FileInfo) *store.Record {
	if len(c.ticks.suspect) == 0 {
		return nil // no unclean end: no read of the record
	}
	rec, ok, err := c.st.Get([]byte(path))
	if err != nil || !ok {
		return nil
	}
	return c.suspect(&rec, fi, c.ledger.WrittenSince(path, fi.Dev, fi.Ino, rec.HashedAt))
}

// lost reports a lost write when now, the record just submitted for path,
// has was's stat identity and backend but another digest: the unclean
// end kept the file's new timestamps and lost its new bytes, so the disk
// holds older bytes than was describes. was may be nil.
func (c *checker) lost(path string, was *store.Record, now store.Record) {
	if was == nil || was.Identity() != now.Identity() || was.Backend != now.Backend || bytes.Equal(was.Digest, now.Digest) {
		return
	}
	c.log.Warn("a write was lost: hashed again after an unclean end, the file holds other bytes under the same stat identity",
		"path", path)
	if c.onLost != nil {
		c.onLost(path, *was, now)
	}
}
