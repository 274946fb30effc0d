package indexer

import "path/filepath"

// Busy reports whether path is in the pipeline: queued, being checked or
// hashed, waiting for a retry or for its write. Its record may change at
// any moment, so an audit leaves it for later.
func (ix *Indexer) Busy(path string) bool { return ix.pipe.pend.has(filepath.Clean(path)) }
