package daemon

import (
	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/store"
)

// markBacklog adds what the index writer holds for lack of space to the
// status: the daemon is not idle while it holds anything.
func markBacklog(out *api.Status, b store.Backlog) {
	if b.Changes == 0 {
		return
	}
	out.Idle = false
	out.Backlog = api.Backlog{Changes: int64(b.Changes), Since: b.Since}
	if b.Err != nil {
		out.Backlog.Reason = b.Err.Error()
	}
}
