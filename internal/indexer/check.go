package indexer

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// checker is what a worker does with one path: it looks at the file and
// its record, and settles the path, gives it a renamed file's record,
// hashes it, or drops what is gone.
type checker struct {
	pipe       *pipeline
	st         *store.Store
	h          Hasher
	backend    key.Backend
	ledger     Ledger
	unread     unreadWrites
	ticks      *ticks
	paths      *pathRules
	scans      *scanner
	moves      *renamer
	displaced  *displaced
	m          *counters
	log        *slog.Logger
	maxRetries int
	onFinding  FindingFunc                     // Options.OnFinding
	sync       func(ctx context.Context) error // Watches.Sync
	dirs       *dirFds                         // the directories first scans open files in
	fsys       *fileSystems
}

// check checks one path and does what it needs.
func (c *checker) check(ctx context.Context, j job) {
	fi, f, err := c.stat(&j)
	if f != nil {
		defer f.Close() // unless hashing took it
	}
	switch {
	case isGone(err):
		c.moves.recheckGone(j.path)
		c.dropPath(ctx, j, shapeGone)
	case err != nil:
		c.m.errors.Add(1)
		c.log.Warn("cannot stat file", "path", j.path, "err", err)
		c.settle(j)
	case fi.IsDir():
		c.scans.request(j.path)
		c.pipe.finish(j)
	case !fi.IsRegular():
		c.dropPath(ctx, j, shapeOther) // a directory may have been replaced: records under it go too
	default:
		c.checkFile(ctx, j, fi, f)
	}
}

// stat returns the file's lstat: the walk's, once, or a fresh one. A file
// its walk did not stat (a first scan's, which hashes every file) is
// opened instead: the identity of the descriptor stands for the lstat, and
// the open file is returned for hashing. One that cannot be opened is
// lstat'ed, which tells what it is now.
func (c *checker) stat(j *job) (fsstat.FileInfo, *hasher.File, error) {
	if j.open {
		j.open = false
		f, err := c.dirs.open(j.path)
		if err == nil {
			c.sized(j, f.Info().Size)
			return f.Info(), f, nil
		}
		fi, err := fsstat.Lstat(j.path)
		if err == nil && fi.IsRegular() {
			c.sized(j, fi.Size)
		}
		return fi, nil, err
	}
	if j.info != nil {
		fi := *j.info
		j.info = nil
		return fi, nil, nil
	}
	fi, err := fsstat.Lstat(j.path)
	return fi, nil, err
}

// sized counts the size of a file its walk did not stat where the walk
// would have, for the scans waiting for it (countSize).
func (c *checker) sized(j *job, size int64) {
	countSize(c.m, j.scans, size)
	j.size = size
}

// checkFile checks a regular file against its record; f is the file open,
// or nil. It gathers the facts once (gatherFile) and does what decideFile
// says.
func (c *checker) checkFile(ctx context.Context, j job, fi fsstat.FileInfo, f *hasher.File) {
	c.pipe.pend.setSize(j.path, j.entry, fi.Size)
	c.ticks.learn(fi.Dev, j.path)
	c.fsys.learn(fi.Dev)
	c.st.Saw(j.path) // before the read: a fenced drop or sweep must spare a record kept
	facts, err := c.gatherFile(&j, fi)
	if err != nil {
		c.m.errors.Add(1)
		c.log.Error("cannot read index", "path", j.path, "err", err)
		c.pipe.finish(j)
		return
	}
	j.shelve = facts.other
	if facts.replaced && displaceable(&facts.rec) && !otherNames(c.st, j.path, &facts.rec) {
		// Another inode took a flagged record's path: keep the record
		// for its inode before anything is written over it.
		c.displaced.keep(j.path, facts.rec, time.Now().UnixNano(), "its path holds another file now")
	}
	if facts.seen {
		// inotify reports a write for the name written alone: the other
		// names of the inode would keep the old digest.
		c.moves.recheckLinks(j.path, facts.known(), &fi)
	}
	step := decideFile(facts)
	if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.Debug("checked", "path", j.path, "step", step.String(), "dev", fi.Dev, "ino", fi.Ino,
			"record", facts.ok, "rec_dev", facts.rec.Dev, "rec_ino", facts.rec.Ino, "state", facts.rec.State.String(),
			"replaced", facts.replaced, "seen", facts.seen, "settled", facts.settled, "other", facts.other)
	}
	switch step {
	case stepUnshelve:
		c.unshelve(j, *facts.shelf)
	case stepUpgrade:
		c.upgrade(j, facts.rec, fi)
	case stepSettle:
		c.settle(j)
	case stepAdopt:
		c.adoptOrHash(ctx, j, fi, facts.known(), f)
	default:
		c.hashFresh(ctx, j, fi, facts.prior(j.path), f)
	}
}

// otherNames reports whether the index holds rec's inode under another
// name than path (or cannot tell).
func otherNames(st *store.Store, path string, rec *store.Record) bool {
	names, err := st.ByInodeAll(rec.Dev, rec.Ino)
	if err != nil {
		return false // keep it: a needless entry costs nothing
	}
	for _, n := range names {
		if string(n) != path {
			return true
		}
	}
	return false
}

// adoptOrHash gives a file without a record of its own the record of the
// file it was renamed from, or of another name of its inode, when the
// renamer's facts allow it, and hashes it otherwise, held against that
// record. here is the record at the path of the file it replaced, or nil:
// the prior record when the inode has none elsewhere.
func (c *checker) adoptOrHash(ctx context.Context, j job, fi fsstat.FileInfo, here *store.Record, f *hasher.File) {
	if !c.dropUnder(ctx, j) { // a file where a directory was: the records under it are stale
		return // it changed meanwhile and is queued again
	}
	adopted, p := c.moves.adopt(ctx, j.path, fi, here, len(j.scans) > 0)
	if adopted {
		c.displaced.written(fi.Dev, fi.Ino)
		c.m.renames.Add(1)
		c.settle(j)
		return
	}
	if p == nil && here != nil {
		p = &prior{rec: *here, from: j.path}
	}
	c.hashFresh(ctx, j, fi, p, f)
}

// hashFresh hashes the file, held against p, once its mtime is old enough
// that the record will not be racily clean; until then it waits.
func (c *checker) hashFresh(ctx context.Context, j job, fi fsstat.FileInfo, p *prior, f *hasher.File) {
	if wait := c.ticks.tooFresh(fi); wait > 0 {
		// Hashed now, the record would be racily clean and re-hashed at the
		// next check: wait until the timestamp tick has surely passed.
		c.pipe.later(ctx, wait, j)
		return
	}
	c.hash(ctx, j, fi, p, f)
}

// unshelve brings back sh, the shelved record of the file's disk, at j's
// path: a disk back where it was. A record there of another disk goes on
// the shelf in turn.
func (c *checker) unshelve(j job, sh store.Record) {
	c.m.unshelved.Add(1)
	c.pipe.write(j, store.Change{Op: store.OpUnshelve, Path: []byte(j.path), Record: sh,
		Gen: c.scans.generation(), Shelve: j.shelve})
}

// upgradeDev gives rec, read from an index older than file-system ids,
// the id of fi's file system when rec holds the device number fi has now:
// the file system is the one it was recorded on. It reports whether it
// did.
func upgradeDev(rec *store.Record, fi fsstat.FileInfo) bool {
	if !fsstat.Legacy(rec.Dev) || rec.Dev != fi.RawDev {
		return false
	}
	rec.Dev = fi.Dev
	return true
}

// upgrade writes rec, settled but read with a device number (upgradeDev),
// with its file system's id, if the record is still the one read. Scans
// waiting for the path see it in the write.
func (c *checker) upgrade(j job, rec store.Record, fi fsstat.FileInfo) {
	was := rec
	was.Dev = fi.RawDev
	rec.Generation = c.scans.generation()
	c.pipe.write(j, store.Change{Op: store.OpPutIf, Path: []byte(j.path), Record: rec, Expect: was})
}

// record returns the path's record, unless the walk that queued it found
// none (only for this first check).
func (c *checker) record(j *job) (store.Record, bool, error) {
	if j.absent {
		j.absent = false
		return store.Record{}, false, nil
	}
	return c.st.Get([]byte(j.path))
}

// hash hashes the file, open as f unless f is nil, and records the result
// as judged against p, the file's prior record (nil: none).
func (c *checker) hash(ctx context.Context, j job, fi fsstat.FileInfo, p *prior, f *hasher.File) {
	if p != nil && displaceable(&p.rec) {
		fromDevice(j.path)
	}
	start := time.Now()
	var res hasher.Result
	var err error
	if f != nil {
		res, err = c.h.HashOpen(ctx, f, c.backend)
	} else {
		res, err = c.h.HashStat(ctx, j.path, c.backend, fi)
	}
	switch {
	case err == nil:
		c.m.hashed(res.Info.Size)
		if _, done := c.conclude(ctx, j, p, c.okRecord(res, start.UnixNano())); !done {
			c.retry(ctx, j, errUnsettled)
		}
	case ctx.Err() != nil:
		c.pipe.finish(j) // shutting down: nothing recorded
	case errors.Is(err, hasher.ErrChanged):
		c.retry(ctx, j, err)
	case isGone(err) || errors.Is(err, hasher.ErrNotRegular):
		// Checked again after a backoff, which decides what is dropped;
		// a file system that keeps saying so gets the bounded retries.
		c.retry(ctx, j, err)
	case !unreadable(err):
		// Not the file's fault (out of descriptors, an external hasher
		// that failed): try again later.
		c.m.errors.Add(1)
		c.retry(ctx, j, err)
	default:
		c.m.errors.Add(1)
		c.log.Warn("cannot read file", "path", j.path, "err", err)
		c.pipe.write(j, shelving(j, c.unreadableRecord(fi, p.lastGood(fi, c.ticks), start.UnixNano())))
	}
}

// unreadableRecord is the record of the file fi that could not be read at
// startNs. When last is not nil, it is last with the new ctime and state
// unreadable, as an audit's finding writes it: the digest of the last
// content known good, which an audit re-tries, and its hash time, so that a
// finding filed against last stays listed. A file that changed before it
// became unreadable has no digest.
func (c *checker) unreadableRecord(fi fsstat.FileInfo, last *store.Record, startNs int64) store.Record {
	rec := store.Record{HashedAt: startNs, State: store.StateUnreadable, Generation: c.scans.generation()}
	if last != nil {
		rec.Backend, rec.Digest, rec.HashedAt, rec.VerifiedAt = last.Backend, last.Digest, last.HashedAt, last.VerifiedAt
	}
	rec.SetIdentity(identity(fi))
	return rec
}

// okRecord builds the record of a successful hash that started at startNs.
func (c *checker) okRecord(res hasher.Result, startNs int64) store.Record {
	rec := store.Record{
		Backend: c.backend, Digest: res.Digest, HashedAt: startNs, VerifiedAt: startNs,
		State: store.StateOK, Generation: c.scans.generation(),
	}
	rec.SetIdentity(identity(res.Info))
	return rec
}

// retry puts a file that changed while it was hashed (or could not be
// hashed for a reason that may pass) back in the pipeline after a backoff.
// Scans waiting for it are released and the old record is kept for them, so
// a sweep does not drop a file that merely keeps changing.
func (c *checker) retry(ctx context.Context, j job, err error) {
	c.m.retries.Add(1)
	// The scans that met the path meanwhile (it was queued by an event, or
	// ahead of their walk) wait no longer either: they keep its old record
	// too, and the check they asked for still follows.
	for _, sc := range append(j.scans, c.pipe.pend.takeScans(j.path, j.entry)...) {
		c.pipe.markSeen(j.path, sc)
		sc.wg.Done()
	}
	j.scans = nil
	if j.attempt >= c.maxRetries {
		c.log.Warn("cannot hash file after retries; giving up until it changes again",
			"path", j.path, "attempts", j.attempt+1, "err", err)
		c.pipe.finish(j)
		return
	}
	c.log.Debug("cannot hash file now; retrying", "path", j.path, "attempt", j.attempt+1, "err", err)
	delay := backoff(j.attempt)
	j.attempt++
	c.pipe.later(ctx, delay, j)
}

// backoff is 250 ms doubling per attempt, capped at 2 minutes.
func backoff(attempt int) time.Duration {
	d := 250 * time.Millisecond << min(attempt, 9)
	return min(d, 2*time.Minute)
}

// settle ends a job whose record is already right: scans mark it seen.
func (c *checker) settle(j job) {
	for _, sc := range j.scans {
		c.pipe.markSeen(j.path, sc)
	}
	c.pipe.finish(j)
}

// recheck puts j back in line to be checked afresh: the path changed while
// it was checked. Its scans go on waiting for it.
func (c *checker) recheck(j job) {
	j.info, j.open, j.absent = nil, false, false
	c.pipe.push(j)
}

// dropPath removes the records at and under a path that no longer exists,
// or that is neither a regular file nor a directory now (s says which).
func (c *checker) dropPath(ctx context.Context, j job, s shape) {
	if c.paths.roots.IsRoot(j.path) {
		// A root that vanished (an unmounted disk, say) keeps its records
		// until a scan of it finds it again.
		c.log.Warn("root is gone; keeping its records", "root", j.path)
		c.pipe.finish(j)
		return
	}
	if c.hasRecords(ctx, j.path, false) && !c.drop(ctx, j, s) {
		return // it changed meanwhile and is queued again
	}
	c.pipe.finish(j)
}

// dropUnder removes the records under j.path, a regular file now that has
// no record. It reports false when the path changed meanwhile and j is
// queued again.
func (c *checker) dropUnder(ctx context.Context, j job) bool {
	if under, err := c.st.HasUnder([]byte(j.path)); err == nil && !under {
		return true // the common case, a new file: one seek instead of a walk of the subtree
	}
	return !c.hasRecords(ctx, j.path, true) || c.drop(ctx, j, shapeFile)
}

// hasRecords reports whether the index holds records at or under path;
// with below, strictly under it. An index that cannot be read is logged
// and holds none.
func (c *checker) hasRecords(ctx context.Context, path string, below bool) bool {
	found, err := recordsAt(ctx, c.st, path, below)
	if err != nil {
		c.m.errors.Add(1)
		c.log.Error("cannot read index", "path", path, "err", err)
	}
	return found
}

// recordsAt reports whether st holds a record at or under path; with
// below, strictly under it.
func recordsAt(ctx context.Context, st *store.Store, path string, below bool) (bool, error) {
	found := false
	err := st.Subtree(ctx, []byte(path), func(p []byte, _ store.Record) error {
		if below && string(p) == path {
			return nil
		}
		found = true
		return store.ErrStop
	})
	return found, err
}

// A drop deletes the records at and under a path its check found gone (or
// no directory), but the path can be back before the delete lands: a
// directory renamed there moves its records in, and a walk of it finds
// them current, neither waiting for this path's place in the pipeline. So drop
// raises a store fence on the path, looks again, and deletes behind the
// fence; a record that arrived there since breaks it, and the path is
// checked again instead.

// maxDropTries bounds the fenced drops of one check; a path busy for
// longer is checked again from the start.
const maxDropTries = 3

// testHookBeforeDrop, set only by tests, runs between drop's second look
// and its delete.
var testHookBeforeDrop func(path string)

// drop removes the records at and under j.path once a second look, made
// behind a fence, finds it still in shape s. It reports false when it
// found the path changed and queued j again.
func (c *checker) drop(ctx context.Context, j job, s shape) bool {
	for range maxDropTries {
		f := c.st.Fence([]byte(j.path))
		if shapeOf(j.path) != s {
			f.Lift()
			break
		}
		if testHookBeforeDrop != nil {
			testHookBeforeDrop(j.path)
		}
		c.keepFlaggedUnder(ctx, j.path)
		n, err := c.st.DropFenced(ctx, f, c.fsys.keepAbsent(j.path)) // it lowers f
		if !errors.Is(err, store.ErrConflict) {
			c.dropped(j.path, n, err)
			return true
		}
	}
	c.recheck(j)
	return false
}

// fromDevice drops the clean pages of the file at path from the page
// cache, so that its next read comes from the device. A flagged record's
// finding was made from the device (the audit reads with O_DIRECT); a page
// cache that still holds the good bytes read before the rot would give
// its recorded digest back to a hash that reads through it (after a chmod,
// a move out of the roots and back), and the finding would go with a key
// the disk no longer holds. Dirty pages stay: they are a write, and an
// edit is one.
func fromDevice(path string) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return // the hash meets what keeps it from opening the file
	}
	_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
	unix.Close(fd)
}

// keepFlaggedUnder keeps, under their inodes, the flagged records at and
// under path that a drop is about to delete (displaced.keepGone).
func (c *checker) keepFlaggedUnder(ctx context.Context, path string) {
	err := c.st.Subtree(ctx, []byte(path), func(p []byte, r store.Record) error {
		c.displaced.keepGone(string(p), &r)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		c.log.Warn("cannot look for flagged records before a drop", "path", path, "err", err)
	}
}

// dropped counts what a drop removed, or logs why it could not.
func (c *checker) dropped(path string, n int, err error) {
	if err != nil {
		c.m.errors.Add(1)
		c.log.Error("cannot drop records", "path", path, "err", err)
		return
	}
	c.m.removed.Add(int64(n))
}

// shape is what a path is, as far as dropping its records goes.
type shape uint8

const (
	shapeGone  shape = iota // nothing there
	shapeFile               // a regular file
	shapeOther              // neither a regular file nor a directory
	shapeDir                // a directory
	shapeError              // lstat failed otherwise
)

// shapeOf lstats path and says what it is.
func shapeOf(path string) shape {
	fi, err := fsstat.Lstat(path)
	switch {
	case isGone(err):
		return shapeGone
	case err != nil:
		return shapeError
	case fi.IsDir():
		return shapeDir
	case fi.IsRegular():
		return shapeFile
	}
	return shapeOther
}

func putChange(path string, rec store.Record) store.Change {
	return store.Change{Op: store.OpPut, Path: []byte(path), Record: rec}
}

// shelving is putChange for j, which shelves the record there when j
// found it another disk's.
func shelving(j job, rec store.Record) store.Change {
	c := putChange(j.path, rec)
	c.Shelve = j.shelve
	return c
}

// unreadable reports errors that are the file's own: its permissions or
// its storage. They are recorded; anything else is retried.
func unreadable(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EIO) ||
		errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.ENODEV)
}

func isGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}
