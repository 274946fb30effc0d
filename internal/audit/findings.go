package audit

import (
	"bytes"

	"github.com/annexd/annexd/store"
)

// A finding is an entry of a problem class, kept in the index's meta under
// the path it was filed at, with the inode of its file. It stands while a
// record holds it (holds): the flagged record with the recorded digest, or
// for a lost write the record of the bytes on disk. So only an edit (a new
// digest), an accept (the entry goes) or a heal (the recorded digest read
// again) clears it; hashing the same bytes again, a restart or a rename
// does not. A file renamed, or moved with its folder, takes its record
// along: the finding is then found under the inode's path now (resolve)
// and listed there, and the entry moves to that path when the audit next
// prunes its entries. The audit keeps the findings in memory too, so that
// status counts exactly what Problems lists without reading every entry.

// holds reports whether r is the record the finding e stands for.
func holds(r *store.Record, e *entry) bool {
	c, _ := parseClass(e.Class)
	switch c {
	case LostWrite:
		return r.State == store.StateOK && bytes.Equal(r.Digest, e.Observed)
	case Corrupt, Untraced, Unreadable:
		flagged := r.State.Flagged() || r.State == store.StateUnreadable
		return flagged && (len(e.Recorded) == 0 || bytes.Equal(r.Digest, e.Recorded))
	}
	return false
}

// standsFor is the class the finding e stands for: its own, or for an
// unreadable file the class it replaced.
func (e *entry) standsFor() Class {
	c, _ := parseClass(e.Class)
	if p, ok := parseClass(e.Prior); ok && c == Unreadable && p.keyKept() {
		return p
	}
	return c
}

// listed is a finding and where its file is now.
type listed struct {
	at   string // the path its entry is filed at
	path string // the path of its file now
	e    entry
}
