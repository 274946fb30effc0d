package daemon

import (
	"context"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/annexd/annexd/internal/deduppart"
	"github.com/annexd/annexd/internal/ledger"
)

// setupDedup builds deduplication and settles the hardlink steps a crash
// cut short. The indexer must exist: files whose records are stale after
// recovery go back to it.
func (a *App) setupDedup(ctx context.Context, writes *ledger.Ledger, reg prometheus.Registerer) error {
	a.dedup = deduppart.New(ctx, deduppart.Config{
		Store:   a.st,
		Indexer: a.ix,
		Ledger:  writes,
		Roots:   a.rootBytes(),
		Dedup:   a.cfg.Dedup,
		Logger:  a.log.With("part", "dedup"),
		OnRun:   a.work.notify,
		AtStep:  killAtStep(os.Getenv(testDedupKillEnv)),
	})
	for _, c := range a.dedup.Collectors() {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
