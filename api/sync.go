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

// IdleWaiter is implemented by an Index that can say when it becomes
// idle instead of being asked again and again: a status long poll then
// waits on it, and reads Status only when it returns.
type IdleWaiter interface {
	// WaitIdle returns once the index's own work is done (its Status may
	// still say busy for other reasons), or ctx ends.
	WaitIdle(ctx context.Context) error
}

// Starter is implemented by an Index that listens before it serves: the
// daemon answers status while it still calibrates. While Starting reports
// true, the server answers 503 with CodeStarting to every request but
// ping, status and metrics, and calls no other Index method but Roots
// and Status; a status long poll waits for the start first.
type Starter interface {
	// Starting says what the daemon does before it serves the index
	// ("calibrating hashing"), and false once it serves.
	Starting() (phase string, starting bool)
}
