package store

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/annexd/annexd/store/codec"
	"github.com/annexd/annexd/store/internal/indexfile"
)

// Errors returned when opening an index.
var (
	// ErrLocked: another process (usually another annexd) holds the index.
	ErrLocked = errors.New("store: index is locked")
	// ErrNotIndex: the file exists but is not an annexd index. It is left
	// untouched.
	ErrNotIndex = errors.New("store: not an annexd index")
	// ErrCorrupt: the file is an index (or claims to be) but its structure
	// is damaged. It is left untouched.
	ErrCorrupt = codec.ErrCorrupt
	// ErrNewerSchema: the index was written by a newer annexd.
	ErrNewerSchema = errors.New("store: index schema is newer than this annexd")
	// ErrNeedsMigration: the index has an older schema and was opened
	// read-only, so it cannot be migrated.
	ErrNeedsMigration = errors.New("store: index schema needs migration")
	// ErrNoIndex: a read-only open found no file.
	ErrNoIndex = errors.New("store: no index")
	// ErrUnwritable: the index, or the directory to make it in, cannot
	// be written: a read-only file system, or no permission. The message
	// says what to do.
	ErrUnwritable = errors.New("store: index not writable")
)

// unwritable makes err, when a read-only file system or a permission
// caused it, also ErrUnwritable; it reads as err.
func unwritable(err error) error {
	if errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission) {
		return unwritableError{err}
	}
	return err
}

type unwritableError struct{ err error }

func (e unwritableError) Error() string   { return e.err.Error() }
func (e unwritableError) Unwrap() []error { return []error{ErrUnwritable, e.err} }

// Errors returned by reads and writes.
var (
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrUngrouped: a read-only store holds digest entries not yet merged
	// into their groups (pending.go), so it cannot list duplicates.
	ErrUngrouped = errors.New("store: records not yet grouped")
	// ErrReadOnly: a write on a store opened read-only.
	ErrReadOnly = errors.New("store: opened read-only")
	// ErrRunning: Run was called while another Run is active.
	ErrRunning = errors.New("store: writer already running")
	// ErrPath: a path that is not absolute and clean.
	ErrPath = errors.New("store: bad path")
	// ErrRecord: a record that cannot be stored (bad digest length, …).
	ErrRecord = codec.ErrRecord
	// ErrNotFound: a move whose source is not in the index.
	ErrNotFound = errors.New("store: not in index")
	// ErrConflict: a conditional change (an adoption, a conditional put)
	// found the index other than its caller had read it, and changed
	// nothing (see ConflictError).
	ErrConflict = errors.New("store: index changed meanwhile")
	// ErrNoSpace: the file system holding the index is full. The change
	// was not made; the index is unchanged and usable.
	ErrNoSpace = indexfile.ErrNoSpace
	// ErrStop may be returned by a Scan, Subtree or Dups callback to stop
	// early without an error.
	ErrStop = errors.New("store: stop")
)

// ConflictError is the ErrConflict of one path: what the change found there.
type ConflictError struct {
	Path  []byte
	Found bool // a record was there
}

func (e *ConflictError) Error() string {
	if e.Found {
		return fmt.Sprintf("%v: %q holds another record", ErrConflict, e.Path)
	}
	return fmt.Sprintf("%v: %q has no record", ErrConflict, e.Path)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }
