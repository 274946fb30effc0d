package indexer

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// State says what a Lookup found.
type State uint8

// Lookup states. Only Current carries a key to trust as the file's key now.
const (
	Current    State = iota + 1 // Key is the key of the file's content now
	Pending                     // new or changed, not hashed yet
	Missing                     // nothing at the path
	NotRegular                  // a directory, symlink, FIFO, socket or device
	Ignored                     // left out by the ignore patterns or excluded
	Unreadable                  // the file cannot be read (Message says why)
	Corrupt                     // content no longer matches the recorded key, and no write made it
	Untraced                    // content no longer matches the recorded key; only the ctime moved
	Absent                      // nothing at the path, and its record is of a file system not mounted there now
)

var stateNames = [...]string{"", "current", "pending", "missing", "not_regular", "ignored", "unreadable", "corrupt", "untraced", "absent"}

// flaggedState is the Lookup state of a record in the flagged state st.
func flaggedState(st store.State) State {
	if st == store.StateUntraced {
		return Untraced
	}
	return Corrupt
}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Result is the answer of Lookup.
type Result struct {
	State   State
	Key     key.Key // set when Current, Corrupt, Untraced or Absent (the recorded one)
	Size    int64   // from the fresh lstat when the path exists; Absent: the recorded size
	Message string
	// Finding is an Absent record's flagged state (Corrupt or Untraced);
	// 0 when it has none.
	Finding State
	// VerifiedAt is the record's (Unix ns) with a key: when its content
	// was last read and matched; 0 when never.
	VerifiedAt int64
}

// maxLookupRounds bounds how often a waiting Lookup re-checks a file that
// keeps changing.
const maxLookupRounds = 8

// Lookup reports the key of the regular file at path as it is now. It
// compares the record with a fresh lstat; when they differ it hashes the file
// on demand (files up to OnDemandMax, or any size when wait is set), waits for
// work already in the pipeline (wait), or reports Pending. A stale key is
// never reported as Current.
func (ix *Indexer) Lookup(ctx context.Context, path string, wait bool) (Result, error) {
	path = filepath.Clean(path)
	if !ix.paths.roots.Contains(path) {
		return Result{}, fmt.Errorf("%w: %s", ErrOutsideRoots, path)
	}
	for round := 0; ; round++ {
		fi, r, done, err := ix.lookupRecord(path)
		if done || err != nil {
			return r, err
		}
		if round >= maxLookupRounds || ctx.Err() != nil {
			return pending(fi), nil
		}
		r, again := ix.lookupPending(ctx, path, fi, wait)
		if !again {
			return r, nil
		}
	}
}

// lookupRecord answers Lookup from a fresh lstat and the record, when they
// tell: done reports an answer in r.
func (ix *Indexer) lookupRecord(path string) (fi fsstat.FileInfo, r Result, done bool, err error) {
	fi, err = fsstat.Lstat(path)
	switch {
	case isGone(err):
		r, err := ix.lookupAbsent(path)
		return fi, r, true, err
	case err != nil:
		return fi, Result{State: Unreadable, Message: err.Error()}, true, nil
	case !fi.IsRegular():
		return fi, Result{State: NotRegular, Size: fi.Size}, true, nil
	case ix.paths.skip(path) || ix.offRootFS(path, fi):
		return fi, Result{State: Ignored, Size: fi.Size}, true, nil
	}
	rec, ok, err := ix.st.Get([]byte(path))
	if err != nil || !ok || !sameFile(&rec, fi) {
		return fi, Result{}, err != nil, err
	}
	switch {
	case rec.State == store.StateUnreadable:
		return fi, Result{State: Unreadable, Size: fi.Size, Message: "could not be read when last tried"}, true, nil
	case rec.State.Flagged():
		k, err := recordKey(path, &rec)
		return fi, Result{State: flaggedState(rec.State), Key: k, Size: fi.Size, VerifiedAt: rec.VerifiedAt}, true, err
	case ix.ticks.current(&rec, fi):
		k, err := recordKey(path, &rec)
		if err != nil {
			return fi, Result{}, true, err
		}
		return fi, Result{State: Current, Key: k, Size: fi.Size, VerifiedAt: rec.VerifiedAt}, true, nil
	}
	return fi, Result{}, false, nil
}

// lookupPending waits for the path's work in the pipeline or hashes it now;
// again reports that Lookup should look at the record again.
func (ix *Indexer) lookupPending(ctx context.Context, path string, fi fsstat.FileInfo, wait bool) (r Result, again bool) {
	if done := ix.pipe.pend.wait(path); done != nil {
		if !wait {
			return pending(fi), false
		}
		select {
		case <-done:
			return Result{}, true
		case <-ctx.Done():
			return pending(fi), false
		}
	}
	if !wait && fi.Size > ix.opt.OnDemandMax || ix.otherDisk(path, fi) || ix.renamedHere(path, fi) {
		ix.pipe.enqueue(ctx, job{path: path}, nil, fi.Size)
		if !wait {
			return pending(fi), false
		}
		return ix.waitPipeline(ctx, path, fi)
	}
	r, retry := ix.hashNow(ctx, path, fi)
	if retry && !wait {
		return pending(fi), false
	}
	return r, retry
}

// lookupAbsent answers Lookup for a path where nothing is: Absent with
// the recorded key and finding when the record is of a file system not
// mounted there now (filesystems.go), else Missing.
func (ix *Indexer) lookupAbsent(path string) (Result, error) {
	rec, ok, err := ix.st.Get([]byte(path))
	if err != nil || !ok {
		return Result{State: Missing}, err
	}
	fs, away := ix.Absent(path, rec.Dev)
	if !away {
		return Result{State: Missing}, nil
	}
	r := Result{State: Absent, Size: rec.Size, Message: notMounted(fs)}
	if len(rec.Digest) == 0 {
		return r, nil // never hashed: no key to name
	}
	if r.Key, err = recordKey(path, &rec); err != nil {
		return Result{}, err
	}
	r.VerifiedAt = rec.VerifiedAt
	if rec.State.Flagged() {
		r.Finding = flaggedState(rec.State)
	}
	return r, nil
}

// notMounted says which file system is not mounted, as the index
// remembers it.
func notMounted(fs FileSystem) string {
	msg := "its file system is not mounted: " + strings.TrimSpace(fs.Type+" "+fs.Key)
	if fs.Point != "" {
		msg += "; last mounted at " + fs.Point
	}
	return msg
}

func pending(fi fsstat.FileInfo) Result { return Result{State: Pending, Size: fi.Size} }

// offRootFS reports whether the file fi at path is on another file system
// than its root, which Options.OneFileSystem leaves out.
func (ix *Indexer) offRootFS(path string, fi fsstat.FileInfo) bool {
	if !ix.opt.OneFileSystem {
		return false
	}
	root, ok := ix.paths.roots.RootOf(path)
	if !ok {
		return false
	}
	rfi, err := fsstat.Lstat(root)
	return err == nil && rfi.Dev != fi.Dev
}

// otherDisk reports whether the record at path is of another file system
// than the file fi, or a record of fi's may be on the shelf: the pipeline's
// check shelves and unshelves them (filesystems.go), a hash here would not.
func (ix *Indexer) otherDisk(path string, fi fsstat.FileInfo) bool {
	if ix.st.HasShelved() {
		return true
	}
	rec, ok, err := ix.st.Get([]byte(path))
	return err == nil && ok && !fsstat.OnFS(rec.Dev, fi)
}

// renamedHere reports whether the file fi at path, which has no record
// that fits it, was renamed here from a name the index records and the
// indexer has not applied the rename yet: that name no longer holds the
// inode. Hashed on demand it would be a new file, its bytes the key, rot
// among them; the pipeline's check takes its record over (renamer.adopt)
// or judges it against that record. A new hard link, whose other name
// still holds the inode, is hashed on demand, held against that name's
// record.
func (ix *Indexer) renamedHere(path string, fi fsstat.FileInfo) bool {
	names, err := ix.st.ByInodeAll(fi.Dev, fi.Ino)
	if err != nil {
		return false
	}
	renamed := false
	for _, n := range names {
		if string(n) == path {
			continue
		}
		if other, err := fsstat.Lstat(string(n)); err == nil && other.Dev == fi.Dev && other.Ino == fi.Ino {
			return false // a link: its other name is still there
		}
		renamed = true
	}
	return renamed
}

// waitPipeline waits for the pipeline's check of path, then asks Lookup
// to look again.
func (ix *Indexer) waitPipeline(ctx context.Context, path string, fi fsstat.FileInfo) (Result, bool) {
	done := ix.pipe.pend.wait(path)
	if done == nil {
		return Result{}, true
	}
	select {
	case <-done:
		return Result{}, true
	case <-ctx.Done():
		return pending(fi), false
	}
}

// hashNow hashes path for Lookup, records the result through the pipeline's
// write path and returns it. retry reports that the file is now pending
// (someone else took it, or it changed while hashed).
func (ix *Indexer) hashNow(ctx context.Context, path string, fi fsstat.FileInfo) (r Result, retry bool) {
	if !ix.pipe.pend.add(path, nil, fi.Size) {
		return Result{}, true
	}
	j := job{path: path}
	select {
	case ix.onDemand <- struct{}{}:
	case <-ctx.Done():
		ix.pipe.finish(j)
		return pending(fi), false
	}
	p := ix.check.priorOf(path, fi)
	start := time.Now()
	res, err := ix.h.HashStat(ctx, path, ix.opt.Backend, fi)
	<-ix.onDemand
	switch {
	case err == nil:
		ix.m.onDemand.Add(1)
		ix.m.hashed(res.Info.Size)
		rec, done := ix.check.conclude(ctx, j, p, ix.check.okRecord(res, start.UnixNano()))
		if !done {
			// Judged once the watcher has caught up: the pipeline's.
			ix.check.retry(ix.ctx(), j, errUnsettled)
			return pending(fi), false
		}
		k, kerr := recordKey(path, &rec)
		if kerr != nil {
			return Result{State: Unreadable, Message: kerr.Error()}, false
		}
		state := Current
		if rec.State.Flagged() {
			state = flaggedState(rec.State)
		}
		return Result{State: state, Key: k, Size: res.Info.Size, VerifiedAt: rec.VerifiedAt}, false
	case errors.Is(err, hasher.ErrChanged):
		// The retry belongs to the pipeline: the caller's ctx ends with its
		// request, and a retry stopped with it would leave the path pending
		// for ever.
		ix.check.retry(ix.ctx(), j, err)
		return Result{}, true
	}
	ix.pipe.finish(j)
	switch {
	case isGone(err):
		return Result{State: Missing}, false
	case errors.Is(err, hasher.ErrNotRegular):
		return Result{State: NotRegular}, false
	case ctx.Err() != nil:
		return pending(fi), false
	}
	ix.Changed(ctx, path) // let the pipeline record it as unreadable
	return Result{State: Unreadable, Size: fi.Size, Message: err.Error()}, false
}

// recordKey is the key of a record for the file at path.
func recordKey(path string, rec *store.Record) (key.Key, error) {
	return key.FromDigest(rec.Backend, rec.Digest, rec.Size, filepath.Base(path), key.ExtRule{})
}

// Current reports whether the stored record of path describes the file as it
// is now, without hashing.
func (ix *Indexer) Current(path string) (bool, error) {
	fi, err := fsstat.Lstat(path)
	if err != nil {
		return false, nil
	}
	rec, ok, err := ix.st.Get([]byte(path))
	if err != nil || !ok {
		return false, err
	}
	return ix.ticks.current(&rec, fi), nil
}

// Unchanged reports whether the file at path, lstat'ed now, is still the
// file rec describes: the same identity, and, for a record in state ok, not
// racily clean (a write in the tick it was hashed in could hide behind the
// same identity). A false answer means rec's key may be wrong.
func (ix *Indexer) Unchanged(path string, rec *store.Record) bool {
	fi, err := fsstat.Lstat(path)
	if err != nil || !sameFile(rec, fi) {
		return false
	}
	return rec.State != store.StateOK || !ix.ticks.racy(rec)
}
