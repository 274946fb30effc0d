// Package codec is the byte layout of annexd's index: the records, the
// keys and values of its buckets, and the order-preserving numbers they
// are built from. It never reads or writes a file. Package store keeps
// the index with it; the hub's view encodes what it shares with the index
// (content keys, largest-first keys, uvarint summaries) with it too.
//
// Every encoding here is on disk: never change one, add a new one.
package codec

import "errors"

// Errors of decoding and of validating records. Package store returns
// them as its own ErrCorrupt and ErrRecord.
var (
	// ErrCorrupt: bytes that do not decode as the index writes them.
	ErrCorrupt = errors.New("store: index is corrupt")
	// ErrRecord: a record that cannot be stored (bad digest length, …).
	ErrRecord = errors.New("store: bad record")
)
