package dedup

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/annexd/annexd/store"
)

// Gate says whether the machine is too busy for background work now, and
// why. The audit's gates (load average, battery, indexer busy) implement it.
type Gate interface {
	Busy() (reason string, busy bool)
}

// ContinuousOptions configure background deduplication. The zero value
// takes the defaults.
type ContinuousOptions struct {
	// Quiet is how long both files of a pair must have been left alone
	// (no change in mtime or ctime, no write in the ledger) before the
	// pair is deduplicated, so a file still being worked on is not.
	// Default 5 minutes.
	Quiet time.Duration
	// Interval is how often the index is planned again. Kick starts a
	// pass sooner. Default 1 minute.
	Interval time.Duration
	// Rate bounds the bytes deduplicated per second: the kernel reads
	// both files of a pair to compare them. Default 64 MiB/s.
	Rate int64
	// MinSize leaves smaller files out. Default 1: every non-empty file.
	MinSize int64
	// Paths limits the work to these files and directories. None: all.
	Paths [][]byte
	// Gates pause the work while any says busy.
	Gates []Gate
	// GatePoll is how often busy gates are asked again. Default 30 s.
	GatePoll time.Duration
	// Now is the clock; tests set it. Default time.Now.
	Now func() time.Time
}

func (o *ContinuousOptions) fill() {
	if o.Quiet <= 0 {
		o.Quiet = 5 * time.Minute
	}
	if o.Interval <= 0 {
		o.Interval = time.Minute
	}
	if o.Rate <= 0 {
		o.Rate = 64 << 20
	}
	if o.GatePoll <= 0 {
		o.GatePoll = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Continuous deduplicates in the background, in reflink mode only: every
// pass plans from the index, leaves pairs that are not quiet yet for a
// later pass, and deduplicates the others one at a time, paced to Rate
// and paused while a gate says busy. Pairs done, and pairs that can never
// be done (already shared, no blocks, refused by the kernel), are
// remembered while their records stay the same; a file system whose probe
// says it cannot share extents is remembered for good. A pair the kernel
// refuses (a btrfs nodatacow file, a copy truncated while it was shared)
// is logged and counted, and stops no other pair.
type Continuous struct {
	d    *Deduper
	opt  ContinuousOptions
	kick chan struct{}

	mu      sync.Mutex
	stats   Stats
	settled map[pairKey]Reason
	noDev   map[uint64]bool

	// passed, set only by tests, is called after each pass.
	passed func(Stats)
}

// Stats are the counters of background deduplication, for status and
// metrics. Counts are since the daemon started.
type Stats struct {
	Freed   int64            // bytes freed
	Done    int64            // pairs deduplicated
	Pending int              // pairs waiting to be quiet or for their turn
	Skipped map[Reason]int64 // pairs skipped, by reason
	Paused  string           // why the work is paused now, or ""
	Passes  int64            // passes over the index
}

// pairKey identifies a pair in the states its records describe.
type pairKey struct {
	dev, keeper, target uint64
	kctime, tctime      int64
}

// Continuous returns background deduplication over d's index.
func (d *Deduper) Continuous(opt ContinuousOptions) *Continuous {
	opt.fill()
	return &Continuous{d: d, opt: opt, kick: make(chan struct{}, 1),
		settled: map[pairKey]Reason{}, noDev: map[uint64]bool{}}
}

// Kick asks for a pass soon, as when the indexer recorded new duplicates.
func (c *Continuous) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Stats returns a copy of the counters.
func (c *Continuous) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Skipped = make(map[Reason]int64, len(c.stats.Skipped))
	for r, n := range c.stats.Skipped {
		s.Skipped[r] = n
	}
	return s
}

// Run makes passes until ctx ends, then returns nil.
func (c *Continuous) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-c.kick:
		}
		if err := c.pass(ctx); err != nil && !errors.Is(err, context.Canceled) {
			c.d.log.Warn("dedup pass failed", "err", err)
		}
		t.Reset(c.opt.Interval)
	}
}

// candidate is one pair ready to be deduplicated.
type candidate struct {
	g   Group // with just the one action
	key pairKey
}

// pass plans once and works through the pairs that are quiet.
func (c *Continuous) pass(ctx context.Context) error {
	ready, waiting, err := c.candidates(ctx)
	c.update(func(s *Stats) { s.Passes++; s.Pending = waiting + len(ready) })
	defer func() {
		if c.passed != nil {
			c.passed(c.Stats())
		}
	}()
	if err != nil {
		return err
	}
	for i, cd := range ready {
		if err := c.waitGates(ctx); err != nil {
			return err
		}
		start := c.opt.Now()
		c.apply(ctx, cd)
		c.update(func(s *Stats) { s.Pending = waiting + len(ready) - i - 1 })
		if err := c.pace(ctx, cd.g.Size, c.opt.Now().Sub(start)); err != nil {
			return err
		}
	}
	return nil
}

// candidates plans from the index and sorts the pairs into ready ones and
// a count of those not quiet yet.
func (c *Continuous) candidates(ctx context.Context) (ready []candidate, waiting int, err error) {
	now := c.opt.Now().UnixNano()
	opt := PlanOptions{Mode: Reflink, Paths: c.opt.Paths, MinSize: c.opt.MinSize}
	err = c.d.idx.Dups(ctx, store.DupOptions{MinSize: max(c.opt.MinSize, 1)}, func(g store.Group) error {
		for _, pg := range PlanGroup(g, opt) {
			if c.deviceRefused(pg.Dev) {
				continue
			}
			for _, a := range pg.Actions {
				k := keyOf(&pg, &a)
				if c.isSettled(k) {
					continue
				}
				if !c.quiet(&pg.Keeper, now) || !c.quiet(&a.Targets[0], now) {
					waiting++
					continue
				}
				one := pg
				one.Actions, one.Frees = []Action{a}, a.Frees
				ready = append(ready, candidate{g: one, key: k})
			}
		}
		return nil
	})
	return ready, waiting, err
}

func keyOf(g *Group, a *Action) pairKey {
	t := &a.Targets[0].Record
	return pairKey{dev: g.Dev, keeper: g.Keeper.Record.Ino, target: t.Ino, kctime: g.Keeper.Record.CtimeNs, tctime: t.CtimeNs}
}

// quiet reports whether a file has been left alone for opt.Quiet: its
// record's mtime, ctime and hashing are that old, and the ledger saw no
// write since.
func (c *Continuous) quiet(f *File, now int64) bool {
	r := &f.Record
	since := now - int64(c.opt.Quiet)
	if max(r.MtimeNs, r.CtimeNs, r.HashedAt) > since {
		return false
	}
	l := c.d.opt.Ledger
	return l == nil || !l.WrittenSince(string(f.Path), r.Dev, r.Ino, since)
}

// apply deduplicates one pair and counts the outcome.
func (c *Continuous) apply(ctx context.Context, cd candidate) {
	plan := Plan{Mode: Reflink, Groups: []Group{cd.g}, Actions: 1, Frees: cd.g.Frees}
	res, err := c.d.Apply(ctx, plan, Request{})
	var unsupported *UnsupportedError
	if errors.As(err, &unsupported) {
		c.d.log.Info("dedup: file system cannot share extents; continuous deduplication leaves it",
			"fs", unsupported.FS, "path", string(unsupported.Path), "err", unsupported.Err)
	}
	c.update(func(s *Stats) {
		s.Done += int64(res.Done)
		s.Freed += res.Freed
		if s.Skipped == nil {
			s.Skipped = map[Reason]int64{}
		}
		for r, n := range res.Skipped {
			s.Skipped[r] += int64(n)
		}
	})
	for _, s := range res.Skips {
		c.logSkip(s)
	}
	for r := range res.Skipped {
		c.settle(cd, r)
	}
	if res.Done > 0 {
		// Sharing changes no timestamp: while the records stay, the pair
		// is shared, and a later pass need not find that out again.
		c.settle(cd, SkipShared)
	}
}

// logSkip logs a pair skipped for a reason a pass cannot expect: the
// kernel refused it, or it failed. Such a pair stops only itself.
func (c *Continuous) logSkip(s Skip) {
	switch s.Reason {
	case SkipShared, SkipNoBlocks, SkipChanged, SkipAway, SkipWritten, SkipUnsupported:
		return
	}
	level := slog.LevelInfo
	if s.Reason == SkipError {
		level = slog.LevelWarn
	}
	c.d.log.Log(context.Background(), level, "background deduplication left a pair alone",
		"keeper", string(s.Keeper), "target", string(s.Target), "reason", string(s.Reason), "detail", s.Detail, "freed", s.Freed)
}

// settle remembers a pair whose outcome will not change while its
// records stay the same, and a device that cannot share extents.
func (c *Continuous) settle(cd candidate, r Reason) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch r {
	case SkipUnsupported:
		c.noDev[cd.g.Dev] = true
	case SkipShared, SkipNoBlocks, SkipOtherMount, SkipRefused, SkipPermission, SkipSymlink, SkipError:
		c.settled[cd.key] = r
	}
}

func (c *Continuous) isSettled(k pairKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.settled[k]
	return ok
}

func (c *Continuous) deviceRefused(dev uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.noDev[dev]
}

func (c *Continuous) update(fn func(*Stats)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn(&c.stats)
}

// waitGates returns once no gate says busy, asking again every GatePoll.
func (c *Continuous) waitGates(ctx context.Context) error {
	for {
		reason, busy := c.busy()
		c.update(func(s *Stats) { s.Paused = reason })
		if !busy {
			return nil
		}
		t := time.NewTimer(c.opt.GatePoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		case <-c.kick:
			t.Stop()
		}
	}
}

func (c *Continuous) busy() (string, bool) {
	for _, g := range c.opt.Gates {
		if reason, busy := g.Busy(); busy {
			return reason, true
		}
	}
	return "", false
}

// pace waits so that deduplicating size bytes, which took took, keeps the
// work at Rate.
func (c *Continuous) pace(ctx context.Context, size int64, took time.Duration) error {
	wait := paceDelay(size, c.opt.Rate, took)
	if wait <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// paceDelay is how long to wait after size bytes took took, at rate bytes
// a second.
func paceDelay(size, rate int64, took time.Duration) time.Duration {
	return time.Duration(float64(size)/float64(rate)*float64(time.Second)) - took
}

// Collector returns a Prometheus collector of the counters, named
// annexd_dedup_*.
func (c *Continuous) Collector() prometheus.Collector { return &collector{c: c} }

type collector struct{ c *Continuous }

var (
	descFreed   = prometheus.NewDesc("annexd_dedup_freed_bytes_total", "Bytes freed by background deduplication.", nil, nil)
	descDone    = prometheus.NewDesc("annexd_dedup_pairs_total", "Pairs deduplicated in the background.", nil, nil)
	descPending = prometheus.NewDesc("annexd_dedup_pending", "Pairs waiting to be quiet or for their turn.", nil, nil)
	descSkipped = prometheus.NewDesc("annexd_dedup_skipped_total", "Pairs skipped, by reason.", []string{"reason"}, nil)
	descPaused  = prometheus.NewDesc("annexd_dedup_paused", "1 while a gate pauses background deduplication.", nil, nil)
)

func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFreed, descDone, descPending, descSkipped, descPaused} {
		ch <- d
	}
}

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	s := m.c.Stats()
	paused := 0.0
	if s.Paused != "" {
		paused = 1
	}
	ch <- prometheus.MustNewConstMetric(descFreed, prometheus.CounterValue, float64(s.Freed))
	ch <- prometheus.MustNewConstMetric(descDone, prometheus.CounterValue, float64(s.Done))
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(s.Pending))
	ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, paused)
	for r, n := range s.Skipped {
		ch <- prometheus.MustNewConstMetric(descSkipped, prometheus.CounterValue, float64(n), string(r))
	}
}
