package store

import "errors"

// Errors returned when opening an index.
var (
	// ErrLocked: another process (usually another annexd) holds the index.
	ErrLocked = errors.New("store: index is locked")
	// ErrNotIndex: the file exists but is not an annexd index. It is left
	// untouched.
	ErrNotIndex = errors.New("store: not an annexd index")
	// ErrCorrupt: the file is an index (or claims to be) but its structure
	// is damaged. It is left untouched.
	ErrCorrupt = errors.New("store: index is corrupt")
	// ErrNewerSchema: the index was written by a newer annexd.
	ErrNewerSchema = errors.New("store: index schema is newer than this annexd")
	// ErrNeedsMigration: the index has an older schema and was opened
	// read-only, so it cannot be migrated.
	ErrNeedsMigration = errors.New("store: index schema needs migration")
	// ErrNoIndex: a read-only open found no file.
	ErrNoIndex = errors.New("store: no index")
)

// Errors returned by reads and writes.
var (
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrReadOnly: a write on a store opened read-only.
	ErrReadOnly = errors.New("store: opened read-only")
	// ErrRunning: Run was called while another Run is active.
	ErrRunning = errors.New("store: writer already running")
	// ErrPath: a path that is not absolute and clean.
	ErrPath = errors.New("store: bad path")
	// ErrRecord: a record that cannot be stored (bad digest length, …).
	ErrRecord = errors.New("store: bad record")
	// ErrNotFound: a rename whose source is not in the index.
	ErrNotFound = errors.New("store: not in index")
	// ErrConflict: a conditional put (OpPutIf) found another record than
	// the one it was made from; nothing was written.
	ErrConflict = errors.New("store: record changed meanwhile")
	// ErrNoSpace: the file system holding the index is full. The change
	// was not made; the index is unchanged and usable.
	ErrNoSpace = errors.New("store: no space left for the index")
	// ErrStop may be returned by a Scan, Subtree or Dups callback to stop
	// early without an error.
	ErrStop = errors.New("store: stop")
)
