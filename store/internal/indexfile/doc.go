// Package indexfile does what a copy of the index needs around the file
// itself: it makes the copy beside the index with the index's mode and
// owner (CreateBeside), removes the copies a crash left (RemoveLeftovers),
// syncs the directory after a rename (SyncDir), and says what a failed
// write of the index means (Hint, ErrNoSpace). Compaction and the
// migrations that copy the index use it; it knows nothing of bbolt.
package indexfile
