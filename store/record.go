package store

import "github.com/annexd/annexd/store/codec"

// Record is what the index stores for one path (package codec encodes
// it).
type Record = codec.Record

// State says what the index knows about a file's content.
type State = codec.State

// Identity is what lstat tells of a file: the fields a record must match
// for its digest to describe the file.
type Identity = codec.Identity

// The states of a record.
const (
	StateOK         = codec.StateOK
	StateUnreadable = codec.StateUnreadable
	StateChanging   = codec.StateChanging
	StateCorrupt    = codec.StateCorrupt
	StatePending    = codec.StatePending
	StateUntraced   = codec.StateUntraced
)
