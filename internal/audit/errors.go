package audit

import "errors"

// Errors returned by the Auditor.
var (
	// ErrConfig: a setting of the [audit] section that cannot be used.
	ErrConfig = errors.New("audit: bad config")
	// ErrPath: a path to audit or accept that is not absolute and clean.
	ErrPath = errors.New("audit: bad path")
	// ErrStopped: the auditor is not running.
	ErrStopped = errors.New("audit: not running")
	// ErrUnknownRun: no run has that id.
	ErrUnknownRun = errors.New("audit: no such run")
	// ErrNotIndexed: a run asked for a path with no record at or below it.
	ErrNotIndexed = errors.New("audit: nothing is indexed at or below")
	// ErrNotFlagged: accept of a path the audit has no problem with.
	ErrNotFlagged = errors.New("audit: nothing flagged there")
)

// Errors of the heals the audit records (heal.go).
var (
	// ErrUnverified: a restored file whose bytes, read from the device,
	// are not its finding's recorded digest. The finding stands.
	ErrUnverified = errors.New("audit: the restored file does not verify")
)
