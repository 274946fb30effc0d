package audit

import (
	"context"
	"hash"
	"sync"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// Store is what the audit needs of the index (*store.Store).
type Store interface {
	Get(path []byte) (store.Record, bool, error)
	ByChecked(ctx context.Context, from []byte, before int64, fn func(d store.Due) error) error
	CountChecked(ctx context.Context, before int64) (store.CheckedCount, error)
	Subtree(ctx context.Context, dir []byte, fn func(path []byte, r store.Record) error) error
	Submit(c store.Change, done func(error))
	GetMeta(name string) ([]byte, bool, error)
	MetaPrefix(ctx context.Context, prefix string, fn func(name string, v []byte) error) error
}

// Digester makes the hash of a backend (*hasher.Hasher): the audit reads
// files itself, paced and at idle priority, but computes the same digests.
type Digester interface {
	NewHash(b key.Backend) (hash.Hash, error)
}

// Indexer is what the audit needs of the indexer.
type Indexer interface {
	// Changed hands over a path the audit found modified or missing, to be
	// checked and recorded like any other change.
	Changed(ctx context.Context, path string)
	// Busy reports whether the path is in the indexer's pipeline.
	Busy(path string) bool
	// Idle reports that the indexer has no work.
	Idle() bool
}

// Ledger is the write ledger: writes that the stat fields may not show.
type Ledger interface {
	// WrittenSince reports a write to the path or to the inode (dev, ino)
	// at or after sinceNs, or that one cannot be ruled out.
	WrittenSince(path string, dev, ino uint64, sinceNs int64) bool
}

// Crashes tells of shutdowns that can lose written data: a power cut, a
// kernel crash, a file system shut down or unmounted uncleanly.
type Crashes interface {
	// UncleanBetween reports whether such a shutdown may have happened
	// between the two times (Unix nanoseconds).
	UncleanBetween(fromNs, toNs int64) bool
}

// Spans is a Crashes made of the time spans in which an unclean shutdown
// happened: for example from a session that left no clean-shutdown marker
// to the start of the next. It is safe for concurrent use.
type Spans struct {
	mu    sync.Mutex
	spans [][2]int64
}

// Add records that an unclean shutdown happened between from and to.
func (s *Spans) Add(fromNs, toNs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, [2]int64{fromNs, toNs})
}

// UncleanBetween implements Crashes.
func (s *Spans) UncleanBetween(fromNs, toNs int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range s.spans {
		if sp[0] < toNs && sp[1] > fromNs {
			return true
		}
	}
	return false
}
