package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/store"
)

// Class is what an audit found for one file.
type Class uint8

// The classes. Only Corrupt, LostWrite, Unreadable and Untraced are
// problems; the others are either good news or the indexer's business.
// The names are written to the index: only append.
const (
	// OK: the content still has the recorded digest.
	OK Class = iota + 1
	// Corrupt: the content differs although the stat identity, ctime
	// included, is the record's: no write made it.
	Corrupt
	// LostWrite: the disk holds older bytes than the record describes,
	// after an unclean shutdown lost a write that was in memory only.
	LostWrite
	// Modified: the file was changed by a write; the indexer re-hashes it.
	Modified
	// Missing: nothing is at the path any more.
	Missing
	// Unreadable: reading failed with a permission or I/O error.
	Unreadable
	// Untraced: the content differs, only the ctime moved (a chmod, a
	// chown, a link, or a write with the mtime set back that nothing
	// saw), and no write was seen: changed without a trace. The key is
	// kept until the user accepts the bytes.
	Untraced
	// Busy: the indexer holds the path; the audit comes back later.
	Busy
	// Retry: a failure that may pass (out of memory, a stop); no finding.
	Retry
	classEnd
)

var classNames = [classEnd]string{"", "ok", "corrupt", "lost_write", "modified", "missing", "unreadable", "untraced", "busy", "retry"}

func (c Class) String() string {
	if c < classEnd {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// parseClass is the inverse of String.
func parseClass(s string) (Class, bool) {
	for c := OK; c < classEnd; c++ {
		if classNames[c] == s {
			return c, true
		}
	}
	return 0, false
}

// Problem reports whether c is a finding the user must look at.
func (c Class) Problem() bool {
	return c == Corrupt || c == LostWrite || c == Unreadable || c == Untraced
}

// keyKept reports whether c keeps a record's key, flagged, for bytes it
// does not name: Corrupt and Untraced.
func (c Class) keyKept() bool { return c == Corrupt || c == Untraced }

// Read is one reading of a file's content.
type Read struct {
	Digest []byte
	// After is the lstat of the path once the read ended.
	After fsstat.FileInfo
	Err   error
	// Source says where the bytes came from: the device, or the page
	// cache only.
	Source Source
	dev    uint64 // the raw st_dev of the file read, for the I/O class note
}

// Facts are the witnesses of one file, gathered by the caller. Classify
// asks for the reads it needs through Verdict.Next.
type Facts struct {
	// Record is the stored record the audit started from.
	Record store.Record
	// Before is the lstat of the path before reading, or its error.
	Before    fsstat.FileInfo
	BeforeErr error
	// OpenErr is the error of opening the file, tried when its identity
	// changed: a file made unreadable (chmod 000 changes ctime) is
	// unreadable, not merely modified.
	OpenErr error
	// Busy: the indexer holds the path.
	Busy bool
	// Settling: the path is gone, before or while it was read, and the
	// index may not say why yet: the run meets it for the first time, or,
	// for a few looks, the indexer has changes on their way (Indexer.Settling). A
	// file renamed just before the audit reached it is gone from a path
	// whose record the indexer moves moments later: counted missing
	// there, it would be counted twice, and handed to the indexer as
	// removed, its move undone.
	Settling bool
	// Away: the path is gone, before or while it was read, and so is the
	// record's file system from the nearest folder above it that exists
	// (unmounted, or a disk pulled).
	// The file is not missing; the indexer keeps its record.
	Away bool
	// Seen: the write ledger saw a write to the path or its inode since
	// the record was hashed; when the ctime moved or the record is
	// flagged, to another name of the inode too. A doubt (it cannot rule
	// one out) is no write.
	Seen bool
	// Synced: Seen was asked again after the ledger caught up with the
	// writes made before the read (SyncLedger). SyncErr: it could not.
	Synced  bool
	SyncErr error
	// Standing is the class of the finding that stands for the record
	// (Corrupt or Untraced; an unreadable finding, the class it replaced),
	// or 0. A file still not ok keeps it.
	Standing Class
	// Racy: the record is ok and its ctime lies within the file system's
	// timestamp granularity of the hash time, so a write in that tick
	// hides in stat. A flagged record keeps the digest of bytes older than
	// its identity (the file's now): the rule does not apply to it.
	Racy bool
	// Unclean: an unclean shutdown may have come after the record was
	// committed and before the bytes it describes were on the disk
	// (Crashes.Suspect).
	Unclean bool
	// First is the first read; Second the read again from the device.
	// Nil until read.
	First, Second *Read
}

// Step is what Classify needs before it can decide.
type Step uint8

// The steps.
const (
	Decided    Step = iota // Verdict.Class is final
	ReadIt                 // read the content (Facts.First)
	ReadAgain              // read it again from the disk (Facts.Second)
	SyncLedger             // wait for the ledger, ask it again (Facts.Synced)
)

// Verdict is Classify's answer.
type Verdict struct {
	Class Class
	Next  Step
	// Transient: the first read disagreed with the record, the second
	// agreed. The file is ok; the storage returned wrong bytes once.
	Transient bool
	// Why names the witness that decided, for the log.
	Why string
}

// Classify decides what happened to a file from the witnesses in f, or
// says what it needs first. Only a witness of a write makes other bytes an
// edit: a stat field a write changes (size, mtime; an inode or device
// that changed is another file), a write the ledger saw, a racily clean
// record. The rules, in order:
//
//   - gone: missing; with its file system away, a retry in a later pass.
//     The same for a file gone while it was read (a disk unmounted
//     under the read).
//     A failed lstat: unreadable, or a retry.
//   - not a regular file any more, or another inode, size or mtime:
//     modified, without reading; unreadable when only ctime moved and it
//     cannot even be opened (what a chmod 000 does).
//   - only ctime moved and a write was seen: modified.
//   - held by the indexer: busy.
//   - same digest: ok.
//   - a write seen since the record was hashed, or a racily clean record:
//     modified (the stat fields cannot witness such a write).
//   - the identity moved while reading: modified.
//   - otherwise the content changed behind every witness. It is read
//     again from the disk: the recorded digest then is a transient error
//     (ok); two reads that disagree are corrupt storage. With only the
//     ctime moved, and still no write seen once the ledger has caught up,
//     it changed without a trace (untraced); with the ctime unchanged (or
//     older, the journal's rollback), a change an unclean shutdown
//     explains is a lost write, anything else is corrupt.
//
// A finding that stands for the record (Standing) keeps its class when
// the file is still corrupt or untraced: a pass does not turn one into
// the other.
func Classify(f *Facts) Verdict {
	ctimeMoved := f.BeforeErr == nil && onlyCtimeMoved(&f.Record, f.Before)
	switch {
	case gone(f.BeforeErr) && f.Away:
		return Verdict{Class: Retry, Why: "its file system is not mounted at its path"}
	case gone(f.BeforeErr) && f.Busy:
		return Verdict{Class: Busy, Why: "gone, and the indexer holds it"}
	case gone(f.BeforeErr) && f.Settling:
		return Verdict{Class: Retry, Why: "gone; looked at again once the indexer has caught up (a rename?)"}
	case gone(f.BeforeErr):
		return Verdict{Class: Missing, Why: "gone"}
	case f.BeforeErr != nil:
		return errVerdict(f.BeforeErr)
	case !f.Before.IsRegular():
		return Verdict{Class: Modified, Why: "no longer a regular file"}
	case ctimeMoved && f.OpenErr != nil && unreadable(f.OpenErr):
		return Verdict{Class: Unreadable, Why: "cannot be opened: " + f.OpenErr.Error()}
	case !sameIdentity(&f.Record, f.Before) && !ctimeMoved:
		return Verdict{Class: Modified, Why: "stat identity changed"}
	case ctimeMoved && f.Seen:
		return Verdict{Class: Modified, Why: "a write was seen since it was hashed"}
	case f.Busy:
		return Verdict{Class: Busy, Why: "the indexer holds it"}
	case f.First == nil:
		return Verdict{Next: ReadIt}
	}
	if v, ok := readVerdict(f, f.First); ok {
		return v
	}
	switch {
	case bytes.Equal(f.First.Digest, f.Record.Digest):
		return Verdict{Class: OK, Why: "same digest"}
	case f.Seen:
		return Verdict{Class: Modified, Why: "a write was seen since it was hashed"}
	case f.Racy:
		return Verdict{Class: Modified, Why: "racily clean record: a write in its timestamp tick shows in no stat field"}
	case f.Second == nil:
		return Verdict{Next: ReadAgain}
	}
	if v, ok := readVerdict(f, f.Second); ok {
		return v
	}
	switch {
	case bytes.Equal(f.Second.Digest, f.Record.Digest):
		return Verdict{Class: OK, Transient: true, Why: "a second read from the disk matched"}
	case !bytes.Equal(f.Second.Digest, f.First.Digest):
		return standing(f, Verdict{Class: Corrupt, Why: "digest differs, and the two reads disagree with each other too"})
	case ctimeMoved && f.Unclean && f.Before.CtimeNs < f.Record.CtimeNs:
		return Verdict{Class: LostWrite, Why: "hashed just before an unclean shutdown that kept its bytes and some metadata from the disk"}
	case ctimeMoved && f.SyncErr != nil:
		return Verdict{Class: Retry, Why: "cannot wait for the write ledger: " + f.SyncErr.Error()}
	case ctimeMoved && !f.Synced:
		return Verdict{Next: SyncLedger}
	case ctimeMoved && f.Seen:
		return Verdict{Class: Modified, Why: "a write was seen since it was hashed"}
	case ctimeMoved:
		return standing(f, Verdict{Class: Untraced,
			Why: "digest differs, only the ctime moved (a chmod, chown, link, or a write with the mtime set back) and no write was seen"})
	case f.Unclean:
		return Verdict{Class: LostWrite, Why: "hashed just before an unclean shutdown that kept its bytes from the disk"}
	}
	return standing(f, Verdict{Class: Corrupt, Why: "digest differs with stat unchanged and no write seen"})
}

// standing keeps the class of the finding that stands for the record, if
// one does: a file still not ok stays what it was found to be.
func standing(f *Facts, v Verdict) Verdict {
	if f.Standing.keyKept() && v.Class != f.Standing {
		v.Class = f.Standing
		v.Why = "still other bytes than recorded, as found before (" + f.Standing.String() + "); now: " + v.Why
	}
	return v
}

// readVerdict decides on a read that failed or saw the file change.
func readVerdict(f *Facts, r *Read) (Verdict, bool) {
	switch {
	case r.Err != nil && errors.Is(r.Err, hasher.ErrChanged):
		return Verdict{Class: Modified, Why: "changed while read"}, true
	case gone(r.Err) && f.Away:
		return Verdict{Class: Retry, Why: "its file system was unmounted while it was read"}, true
	case gone(r.Err) && f.Settling:
		return Verdict{Class: Retry, Why: "gone while read; looked at again once the indexer has caught up"}, true
	case gone(r.Err):
		return Verdict{Class: Missing, Why: "gone while read"}, true
	case r.Err != nil:
		return errVerdict(r.Err), true
	case !r.After.Same(f.Before):
		return Verdict{Class: Modified, Why: "changed while read"}, true
	}
	return Verdict{}, false
}

// errVerdict classifies a failed lstat or read: the file's own errors are
// findings, anything else is tried again later.
func errVerdict(err error) Verdict {
	if unreadable(err) {
		return Verdict{Class: Unreadable, Why: err.Error()}
	}
	return Verdict{Class: Retry, Why: err.Error()}
}

// unreadable reports errors that belong to the file: its permissions or
// its storage.
func unreadable(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EIO) ||
		errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.ENODEV)
}

func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// sameIdentity reports whether the stat identity of fi is rec's.
func sameIdentity(rec *store.Record, fi fsstat.FileInfo) bool {
	return fsstat.OnFS(rec.Dev, fi) && rec.Ino == fi.Ino && rec.Size == fi.Size &&
		rec.MtimeNs == fi.MtimeNs && rec.CtimeNs == fi.CtimeNs
}

// onlyCtimeMoved reports a file whose identity differs from rec's in
// ctime alone, as after a chmod, chown or link.
func onlyCtimeMoved(rec *store.Record, fi fsstat.FileInfo) bool {
	return fsstat.OnFS(rec.Dev, fi) && rec.Ino == fi.Ino && rec.Size == fi.Size && rec.MtimeNs == fi.MtimeNs && rec.CtimeNs != fi.CtimeNs
}

// racy reports a racily clean record: its ctime is not older than the
// start of its hashing by more than the file system's granularity gran
// (store.RacilyClean).
func racy(rec *store.Record, granNs int64) bool {
	return store.RacilyClean(rec, granNs)
}

// lostWriteSpan is when an unclean shutdown must have happened to keep the
// bytes rec describes from the disk: after the record was committed
// (after HashedAt) and before the kernel would have written back data
// written at rec's ctime (ctime + writeback). ok is false when the span is
// empty: the file was hashed after its bytes had surely reached the disk.
func lostWriteSpan(rec *store.Record, writebackNs int64) (from, to int64, ok bool) {
	from, to = rec.HashedAt, rec.CtimeNs+writebackNs
	return from, to, rec.HashedAt != 0 && from < to
}
