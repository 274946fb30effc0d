package dedup

import (
	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
)

// Caller is the user a run acts for.
type Caller struct {
	UID  uint32
	GIDs []uint32 // primary and supplementary groups
}

// access answers what the caller may see and change.
type access struct {
	c *Caller
}

func newAccess(c *Caller) *access { return &access{c: c} }

// readable keeps the members the caller may read.
func (a *access) readable(ms []store.Member) []store.Member {
	if a.c == nil {
		return ms
	}
	return nil
}

// canModify reports whether the caller could write the file itself.
func (a *access) canModify(path []byte, fi fsstat.FileInfo) bool {
	return a.c == nil
}

// canReplace reports whether the caller could itself replace the name
// path of the file fi.
func (a *access) canReplace(path []byte, fi fsstat.FileInfo) bool {
	return a.c == nil
}
