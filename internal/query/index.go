package query

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/hasher/calibrate"
	"github.com/annexd/annexd/internal/annexlink"
	"github.com/annexd/annexd/internal/indexer"
	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/key"
)

// Config is what an Index answers from.
type Config struct {
	Store   Store
	Indexer Indexer
	Watcher Watcher
	Roots   roots.Set
	Backend key.Backend
	About   About
	Logger  *slog.Logger

	// Parts add what they report to the status; nil: left out.
	Parts Parts
	// Forgot is called after a forget dropped records (nil: nothing).
	Forgot func()
}

// About is what every status says of the daemon.
type About struct {
	Version   string
	IndexPath string
	Started   time.Time
	// Calibration is the hasher's, when one was measured or reused.
	Calibration *calibrate.Calibration
}

// Parts report the daemon's other parts in the status; a nil func leaves
// its part out.
type Parts struct {
	Dedup func() *api.DedupStatus
	Hub   func() *api.HubStatus
	Audit func() *api.AuditStatus
}

// Index answers the API's questions about the index (api.Index).
type Index struct {
	cfg       Config
	log       *slog.Logger
	roots     []string // cfg.Roots.Paths()
	rootBytes [][]byte // the same as bytes

	// outside is the last list of records outside the roots (nil until
	// the check at start is done); outsideRun serializes the checks.
	outside    atomic.Pointer[outsideState]
	outsideRun sync.Mutex
}

var _ api.Index = (*Index)(nil)

// New returns an Index over cfg's parts.
func New(cfg Config) *Index {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Forgot == nil {
		cfg.Forgot = func() {}
	}
	x := &Index{cfg: cfg, log: cfg.Logger, roots: cfg.Roots.Paths()}
	for _, r := range x.roots {
		x.rootBytes = append(x.rootBytes, []byte(r))
	}
	return x
}

// Roots returns the roots, as the index stores paths under them.
func (x *Index) Roots() []string { return x.roots }

// Backend is the hash whose digests the index holds.
func (x *Index) Backend() key.Backend { return x.cfg.Backend }

// Sync returns once the watcher has read every change made before the
// call.
func (x *Index) Sync(ctx context.Context) error { return x.cfg.Watcher.Sync(ctx) }

// WaitIdle returns once the indexer, the watcher and the hand-off
// between them are idle.
func (x *Index) WaitIdle(ctx context.Context) error { return x.cfg.Indexer.WaitIdle(ctx) }

var lookupStates = map[indexer.State]api.LookupState{
	indexer.Current:    api.StateCurrent,
	indexer.Pending:    api.StatePending,
	indexer.Missing:    api.StateMissing,
	indexer.NotRegular: api.StateNotRegular,
	indexer.Ignored:    api.StateIgnored,
	indexer.Unreadable: api.StateUnreadable,
	indexer.Corrupt:    api.StateCorrupt,
	indexer.Untraced:   api.StateUntraced,
	indexer.Absent:     api.StateAbsent,
}

// Lookup asks the indexer for the key of the file at path now; a
// git-annex symlink answers with the key it names.
func (x *Index) Lookup(ctx context.Context, path []byte, wait bool) (api.LookupResult, error) {
	r, err := x.cfg.Indexer.Lookup(ctx, string(path), wait)
	if errors.Is(err, indexer.ErrOutsideRoots) {
		return api.LookupResult{Path: path, State: api.StateOutsideRoots}, nil
	}
	if err != nil {
		return api.LookupResult{}, err
	}
	st, ok := lookupStates[r.State]
	if !ok {
		return api.LookupResult{}, fmt.Errorf("daemon: lookup state %v has no API name", r.State)
	}
	if st == api.StateNotRegular {
		if k, ok := annexlink.Key(string(path)); ok {
			return api.LookupResult{Path: path, State: api.StateAnnexLink, Key: k}, nil
		}
	}
	out := api.LookupResult{Path: path, State: st, Key: r.Key, Size: r.Size, Message: r.Message, Finding: lookupStates[r.Finding]}
	if r.VerifiedAt != 0 {
		out.VerifiedAt = time.Unix(0, r.VerifiedAt)
	}
	return out, nil
}
