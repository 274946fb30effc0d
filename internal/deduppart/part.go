package deduppart

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/audit"
	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/internal/dedup"
	"github.com/annexd/annexd/store"
)

// Store is what deduplication reads and writes of the index
// (*store.Store): the groups, the hardlink journal, and the figures that
// tell the survey loop the groups changed.
type Store interface {
	dedup.Index
	dedup.Meta
	Stats() (store.Stats, error)
}

// Indexer is what deduplication asks the indexer (*indexer.Indexer).
type Indexer interface {
	dedup.Indexer // hears of paths whose records no longer match
	// Bulk reports that the indexer works in bulk: the background mode
	// pauses then.
	Bulk() bool
	// WaitIdle returns once the indexer is idle, or ctx ends.
	WaitIdle(ctx context.Context) error
}

// Config is what a Part is built from.
type Config struct {
	Store   Store
	Indexer Indexer
	Ledger  dedup.Ledger
	Roots   [][]byte
	Dedup   config.Dedup
	Logger  *slog.Logger
	// OnRun is told when a run asked for through the API begins or ends.
	OnRun func()
	// AtStep, when set, hears each step of a move to the trash
	// (dedup.Options.AtStep): a seam for the tests of recovery.
	AtStep func(step string)
}

// Part is the daemon's deduplication: the runs asked for through the API
// (api.Deduper) and, when configured, the background mode.
type Part struct {
	st    Store
	ix    Indexer
	d     *dedup.Deduper
	c     *dedup.Continuous // nil unless [dedup] continuous
	gates []dedup.Gate      // the background mode's
	roots [][]byte
	log   *slog.Logger
	onRun func()

	running atomic.Int32 // runs asked for that go on now

	mu    sync.Mutex
	asked int64 // runs asked for
	done  int64 // their actions done
	freed int64 // their bytes freed
	skips map[dedup.Reason]int64
}

var _ api.Deduper = (*Part)(nil)

// New builds deduplication and settles the hardlink steps a crash cut
// short. The indexer must exist: files whose records are stale after
// recovery go back to it.
func New(ctx context.Context, c Config) *Part {
	p := &Part{st: c.Store, ix: c.Indexer, roots: c.Roots, log: c.Logger, onRun: c.OnRun, skips: map[dedup.Reason]int64{}}
	p.d = dedup.New(c.Store, dedup.Options{
		Roots:   p.roots,
		Ledger:  c.Ledger,
		Intents: dedup.NewMetaIntents(c.Store),
		Indexer: c.Indexer,
		Workers: c.Dedup.Workers,
		AtStep:  c.AtStep,
		Logger:  p.log,
	})
	if err := p.d.Recover(ctx); err != nil {
		// Settled steps are done; one left open makes hardlink runs
		// try again first, and the rest of the daemon goes on.
		p.log.Error("dedup recovery incomplete", "err", err)
	}
	if cfg := c.Dedup; cfg.Continuous {
		p.gates = dedupGates(c.Indexer, cfg.MaxPressure, cfg.MaxLoad, cfg.IgnoreBattery)
		p.c = p.d.Continuous(dedup.ContinuousOptions{
			Quiet:    cfg.Quiet,
			Interval: cfg.Interval,
			Rate:     int64(cfg.Rate),
			MinSize:  int64(cfg.MinSize),
			Paths:    p.roots,
			Gates:    p.gates,
		})
	}
	return p
}

// Collectors export the runs asked for and, when on, the background
// mode.
func (p *Part) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{collector{p}}
	if p.c != nil {
		cs = append(cs, p.c.Collector())
	}
	return cs
}

// Running reports whether a run asked for through the API goes on now.
func (p *Part) Running() bool { return p.running.Load() > 0 }

// dedupGates are what pause background deduplication, the audit's gates:
// the indexer's bulk work; a busy machine, from the pressure stall
// information above [dedup] max_pressure where the kernel has it, else
// from the load average per CPU above [dedup] max_load (less the one pair
// it works on); a discharging battery unless [dedup] ignore_battery.
func dedupGates(ix interface{ Bulk() bool }, maxPressure, maxLoad float64, ignoreBattery bool) []dedup.Gate {
	c := audit.Config{MaxPressure: maxPressure, MaxLoad: maxLoad, IgnoreBattery: ignoreBattery}
	c.Fill()
	var gs []dedup.Gate
	for _, g := range audit.Gates(ix, &c, 1, nil, "", "") {
		gs = append(gs, g)
	}
	return gs
}

// Run runs the background mode until ctx ends, when it is on.
func (p *Part) Run(ctx context.Context) error {
	if p.c == nil {
		return nil
	}
	return p.c.Run(ctx)
}

// count adds a run's outcome to the counters of the runs asked for.
func (p *Part) count(out dedup.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked++
	p.done += int64(out.Done)
	p.freed += out.Freed
	for r, n := range out.Skipped {
		p.skips[r] += int64(n)
	}
}

// Status is deduplication for the daemon's status: the runs asked for and
// the background mode's counts together.
func (p *Part) Status() *api.DedupStatus {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	out := &api.DedupStatus{Runs: p.asked, Pairs: p.done, FreedBytes: p.freed}
	skipped := map[string]int64{}
	for r, n := range p.skips {
		skipped[string(r)] += n
	}
	p.mu.Unlock()
	if p.c != nil {
		s := p.c.Stats()
		out.Continuous = true
		out.FreedBytes += s.Freed
		out.Pairs += s.Done
		out.Pending, out.Paused, out.Passes = s.Pending, p.pausedNow(s.Paused), s.Passes
		for r, n := range s.Skipped {
			skipped[string(r)] += n
		}
	}
	if len(skipped) > 0 {
		out.Skipped = skipped
	}
	return out
}

// pausedNow is why the background mode is paused now. It last looked at
// its gates up to a poll ago, as paused says; they are looked at again,
// so that status never says it waits for what has passed, and when they
// are open it is woken to go on at once.
func (p *Part) pausedNow(paused string) string {
	if paused == "" {
		return ""
	}
	for _, g := range p.gates {
		if why, busy := g.Busy(); busy {
			return why
		}
	}
	p.c.Kick()
	return ""
}
