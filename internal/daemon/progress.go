package daemon

import (
	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/indexer"
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

// walkProgress is the API's form of the running walks' progress.
func walkProgress(w *indexer.WalkProgress) *api.WalkProgress {
	if w == nil {
		return nil
	}
	return &api.WalkProgress{Walking: w.Walking, Files: w.Files, Bytes: w.Bytes, ExpectFiles: w.ExpectFiles, ExpectBytes: w.ExpectBytes,
		ExpectFrom: w.ExpectFrom, DoneBytes: w.DoneBytes}
}
