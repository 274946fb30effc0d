package indexer

import "path/filepath"

// Busy reports whether path is in the pipeline: queued, being checked or
// hashed, waiting for a retry or for its write. Its record may change at
// any moment, so an audit leaves it for later.
func (ix *Indexer) Busy(path string) bool { return ix.pipe.pend.has(filepath.Clean(path)) }

// Settling reports whether changes are on their way to the pipeline:
// events the watcher holds or has not handed over, removals waiting out
// their delay, scans to come. A file gone from under its record may be a
// move the indexer has not applied yet, so an audit looks at it again
// once they have passed.
func (ix *Indexer) Settling() bool {
	return ix.feed.held() > 0 || ix.removals.len() > 0 || ix.scans.pending() > 0
}
