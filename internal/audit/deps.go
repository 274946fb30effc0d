package audit

import (
	"context"
	"hash"
	"sync"
	"time"

	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// Store is what the audit needs of the index (*store.Store).
type Store interface {
	Get(path []byte) (store.Record, bool, error)
	ByChecked(ctx context.Context, from []byte, before int64, fn func(d store.Due) error) error
	CountChecked(ctx context.Context, before int64) (store.CheckedCount, error)
	CountCheckedUnder(ctx context.Context, before int64, dirs [][]byte) (store.CheckedCount, error)
	Committed() (uint64, error)
	Subtree(ctx context.Context, dir []byte, fn func(path []byte, r store.Record) error) error
	ByInodeAll(dev, ino uint64) ([][]byte, error)
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
	// Settling reports whether changes are on their way to the pipeline
	// (the watcher's events, removals, scans): a file gone from its path
	// may have moved, and the index say so only once they have passed.
	Settling() bool
	// Bulk reports that the indexer works in bulk: a walk, or many
	// changes queued (the audit waits then).
	Bulk() bool
}

// Ledger is the write ledger: writes that the stat fields may not show.
type Ledger interface {
	// Since answers whether the path or the inode (dev, ino) was written
	// at or after sinceNs: seen written, cannot rule it out, or not.
	Since(path string, dev, ino uint64, sinceNs int64) ledger.Answer
}

// Crashes tells of shutdowns that can lose written data: a power cut, a
// kernel crash, a file system shut down or unmounted uncleanly.
type Crashes interface {
	// Suspect reports whether such a shutdown may have kept the bytes rec
	// describes from reaching the disk: rec was committed shortly before
	// it, while they could still be in memory only.
	Suspect(rec *store.Record) bool
}

// Spans is a Crashes made of the time spans in which an unclean shutdown
// happened: for example from the last commit of a run that left no
// clean-shutdown marker to the start of the next. A record is suspect when
// such a span overlaps lostWriteSpan. It is safe for concurrent use.
type Spans struct {
	// Writeback is how long written data may stay in memory before the
	// kernel writes it back; 0: the vm.dirty sysctls plus 30 s.
	Writeback time.Duration

	mu    sync.Mutex
	spans [][2]int64
}

// Add records that an unclean shutdown happened between from and to
// (Unix nanoseconds).
func (s *Spans) Add(fromNs, toNs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, [2]int64{fromNs, toNs})
}

// Suspect implements Crashes.
func (s *Spans) Suspect(rec *store.Record) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Writeback <= 0 {
		s.Writeback = writebackOf("/proc")
	}
	from, to, ok := lostWriteSpan(rec, int64(s.Writeback))
	if !ok {
		return false
	}
	for _, sp := range s.spans {
		if sp[0] < to && sp[1] > from {
			return true
		}
	}
	return false
}

// CrashesFunc is a Crashes made of a function, such as one that asks the
// index which records it does not trust after an unclean shutdown.
type CrashesFunc func(rec *store.Record) bool

// Suspect implements Crashes.
func (f CrashesFunc) Suspect(rec *store.Record) bool { return f(rec) }
