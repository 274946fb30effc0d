package api

import "context"

// Syncer is implemented by an Index whose watcher can be synced: GET
// /v1/status?wait=idle calls Sync first, so the wait covers every change
// made before the request. Without it the wait is for idle only.
type Syncer interface {
	// Sync returns once the daemon has seen every file system change
	// made before the call (it is pending or indexed), or ctx ends.
	Sync(ctx context.Context) error
}
