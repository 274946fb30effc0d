package dedup

import (
	"errors"
	"fmt"
)

// Errors of a run.
var (
	// ErrUnsupported: the file system cannot share extents. Nothing on it
	// was changed. The error is an *UnsupportedError naming it.
	ErrUnsupported = errors.New("dedup: file system cannot share extents")
	// ErrDiffers: the kernel found the two files' bytes different, so it
	// changed nothing. The index's records of them are out of date.
	ErrDiffers = errors.New("dedup: contents differ")
	// ErrNoIntents: hardlink or trash mode was asked of a Deduper
	// without a journal.
	ErrNoIntents = errors.New("dedup: hardlink and trash modes need an intent journal")
	// ErrPath: a path that is not absolute.
	ErrPath = errors.New("dedup: bad path")
	// ErrForeign: recovery found a file it did not make at a name of an
	// interrupted step, and left it there.
	ErrForeign = errors.New("dedup: a file this run did not make is in the way")
)

// UnsupportedError says which file system could not share extents, and
// what to do instead.
type UnsupportedError struct {
	FS   string // the file system's type, such as "ext4"
	Dev  uint64 // its device, as Group.Dev
	Path []byte // a file on it
	Err  error  // what the kernel answered
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("dedup: %s (holding %s) cannot share extents: %v; --hardlink links duplicates instead",
		e.FS, e.Path, e.Err)
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// Unwrap returns the kernel's answer.
func (e *UnsupportedError) Unwrap() error { return e.Err }
