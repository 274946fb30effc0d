package indexer

import "time"

// unreadWrites answers whether a file may have been written without the
// ledger knowing yet (Watches.CatchingUp: the watcher reads no event
// while it sets up its watches). Only a write after a directory's watch
// was added can be unread, and any write or rename moves the file's ctime
// past the watcher's start; so a file whose ctime is older, renamed while
// the daemon was down say, is not in doubt.
type unreadWrites struct {
	unread func() bool // nil: never
	since  int64       // Unix ns: before the watcher started, less a tick of the ctime clock
}

// ctimeSlack covers a ctime taken from a coarse clock, behind the real time.
const ctimeSlack = time.Second

func newUnreadWrites(unread func() bool, start time.Time) unreadWrites {
	return unreadWrites{unread: unread, since: start.Add(-ctimeSlack).UnixNano()}
}

// may reports whether a file of ctime ctimeNs may have an unread write.
func (u unreadWrites) may(ctimeNs int64) bool {
	return u.unread != nil && ctimeNs >= u.since && u.unread()
}

// recent reports whether a write at ctime ctimeNs may be one the ledger
// was told of: only one after the watcher started can be. Older writes,
// made while the daemon was down, reach no ledger.
func (u unreadWrites) recent(ctimeNs int64) bool { return ctimeNs >= u.since }
