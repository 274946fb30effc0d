package daemon

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/audit"
	"github.com/annexd/annexd/internal/dedup"
	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/store"
)

var _ api.Deduper = (*adapter)(nil)

// progressEvery is the least time between two progress events of a run.
const progressEvery = 200 * time.Millisecond

// dedupPart is the daemon's deduplication: the runs asked for through
// the API and, when configured, the background mode.
type dedupPart struct {
	d     *dedup.Deduper
	c     *dedup.Continuous // nil unless [dedup] continuous
	gates []dedup.Gate      // the background mode's
	roots [][]byte
	log   *slog.Logger

	mu    sync.Mutex
	asked int64 // runs asked for
	done  int64 // their actions done
	freed int64 // their bytes freed
	skips map[dedup.Reason]int64
}

// setupDedup builds deduplication and settles the hardlink steps a crash
// cut short. The indexer must exist: files whose records are stale after
// recovery go back to it.
func (a *App) setupDedup(ctx context.Context, writes *ledger.Ledger, reg prometheus.Registerer) error {
	cfg := a.cfg.Dedup
	p := &dedupPart{skips: map[dedup.Reason]int64{}, log: a.log.With("part", "dedup")}
	for _, r := range a.cfg.Roots {
		p.roots = append(p.roots, []byte(r))
	}
	p.d = dedup.New(a.st, dedup.Options{
		Roots:   p.roots,
		Ledger:  writes,
		Intents: dedup.NewMetaIntents(a.st),
		Rehash:  func(path []byte) { a.ix.Rehash(ctx, string(path)) },
		Workers: cfg.Workers,
		AtStep:  killAtStep(os.Getenv(testDedupKillEnv)),
		Logger:  p.log,
	})
	a.dedup = p
	if err := p.d.Recover(ctx); err != nil {
		// Settled steps are done; one left open makes hardlink runs
		// try again first, and the rest of the daemon goes on.
		a.log.Error("dedup recovery incomplete", "err", err)
	}
	cs := []prometheus.Collector{dedupCollector{p}}
	if cfg.Continuous {
		p.gates = dedupGates(a.ix, cfg.MaxPressure, cfg.MaxLoad, cfg.IgnoreBattery)
		p.c = p.d.Continuous(dedup.ContinuousOptions{
			Quiet:    cfg.Quiet,
			Interval: cfg.Interval,
			Rate:     int64(cfg.Rate),
			MinSize:  int64(cfg.MinSize),
			Paths:    p.roots,
			Gates:    p.gates,
		})
		cs = append(cs, p.c.Collector())
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

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

// runDedup runs the background mode until ctx ends, when it is on.
func (a *App) runDedup(ctx context.Context) error {
	if a.dedup == nil || a.dedup.c == nil {
		return nil
	}
	return a.dedup.c.Run(ctx)
}

// surveyEvery is how often the daemon looks for duplicate groups whose
// blocks it has not surveyed since they changed.
const surveyEvery = time.Minute

// runSurveys keeps the surveys of block sharing complete, so that what
// the metrics call reclaimable covers every group: whenever the indexer
// is idle, it surveys each group the index keeps no survey of (after a
// scan, after a change to one of its files), pausing while the indexer
// works. It walks the groups again only once the index's figures moved
// since its last walk: a group whose survey the index refused (a file
// changed, its record not yet) waits for that change.
func (a *App) runSurveys(ctx context.Context) error {
	t := time.NewTicker(surveyEvery)
	defer t.Stop()
	var walked surveyState
	for {
		if a.ix.WaitIdle(ctx) != nil {
			return nil
		}
		if s, err := a.st.Stats(); err == nil && s.Surveyed < s.DupGroups && stateOf(s) != walked {
			start := time.Now()
			n, err := a.dedup.d.SurveyMissing(ctx, a.ix.WaitIdle)
			if err != nil && ctx.Err() == nil {
				a.dedup.log.Warn("surveying duplicate groups failed", "err", err)
			}
			a.dedup.log.Debug("surveyed duplicate groups", "groups", n, "took", time.Since(start).Round(time.Millisecond))
			if s, err := a.st.Stats(); err == nil {
				walked = stateOf(s)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// surveyState is what tells runSurveys that the groups changed.
type surveyState struct{ files, bytes, groups, duplicate, surveyed, reclaimable int64 }

func stateOf(s store.Stats) surveyState {
	return surveyState{s.Files, s.Bytes, s.DupGroups, s.Duplicate, s.Surveyed, s.Reclaimable}
}

// Dedup implements api.Deduper.
func (x *adapter) Dedup(ctx context.Context, req api.DedupRequest, send func(api.DedupEvent) error) (api.DedupResult, error) {
	x.a.work.dedupRuns.Add(1)
	defer x.a.work.dedupRuns.Add(-1)
	x.a.work.notify()
	return x.a.dedup.run(ctx, req, send)
}

// run plans, reports the plan and, unless it is a dry run, carries it out.
func (p *dedupPart) run(ctx context.Context, req api.DedupRequest, send func(api.DedupEvent) error) (api.DedupResult, error) {
	dr, err := dedupRequest(req, p.roots)
	res := api.DedupResult{Mode: dr.Mode.String(), DryRun: req.DryRun}
	if err != nil {
		return res, err
	}
	plan, err := p.d.Plan(ctx, dr)
	if err != nil {
		return res, err
	}
	plan, lost := leaveUnsupported(plan)
	res.Planned = plan.Actions
	if err := sendPlan(plan, lost, req, send); err != nil {
		return res, err
	}
	var out dedup.Result
	defer func() { p.count(out) }()
	if req.DryRun || plan.Actions == 0 {
		return res, unsupportedError(lost)
	}
	out, err = p.apply(ctx, plan, dr, req.Progress, send)
	fillResult(&res, out)
	p.log.Info("dedup run", "mode", res.Mode, "uid", req.UID, "planned", res.Planned, "done", out.Done,
		"freed", out.Freed, "skipped", len(out.Skips), "err", err)
	for _, s := range out.Skips {
		ev := api.DedupSkip{Keeper: s.Keeper, Target: s.Target, Reason: string(s.Reason), Detail: s.Detail}
		if err := send(api.DedupEvent{Skip: &ev}); err != nil {
			return res, err
		}
	}
	if err != nil && !errors.Is(err, dedup.ErrUnsupported) {
		return res, err // ctx ended: the result so far
	}
	for _, u := range out.Unsupported {
		lost = append(lost, unsupported{err: u})
	}
	return res, unsupportedError(lost)
}

// apply carries out plan, sending progress events when asked, at most
// one every progressEvery.
func (p *dedupPart) apply(ctx context.Context, plan dedup.Plan, dr dedup.Request, progress bool, send func(api.DedupEvent) error) (dedup.Result, error) {
	var last atomic.Pointer[dedup.Progress]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if progress {
		dr.Progress = func(pr dedup.Progress) { last.Store(&pr) } // called under the run's lock: no I/O here
		wg.Go(func() { sendProgress(&last, stop, send) })
	}
	out, err := p.d.Apply(ctx, plan, dr)
	close(stop)
	wg.Wait()
	return out, err
}

// sendProgress sends the latest progress every progressEvery until stop
// is closed, when it changed.
func sendProgress(last *atomic.Pointer[dedup.Progress], stop <-chan struct{}, send func(api.DedupEvent) error) {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	var sent *dedup.Progress
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		pr := last.Load()
		if pr == nil || pr == sent {
			continue
		}
		sent = pr
		if send(api.DedupEvent{Progress: &api.DedupProgress{Done: pr.Done, Total: pr.Total, Freed: pr.Freed}}) != nil {
			return
		}
	}
}

// unsupported is a file system that cannot share extents, with what its
// groups would have freed.
type unsupported struct {
	err             *dedup.UnsupportedError
	groups, actions int
	frees           int64
}

// leaveUnsupported takes the groups on file systems that cannot share
// extents out of a plan: a run could only skip each of their actions.
func leaveUnsupported(plan dedup.Plan) (dedup.Plan, []unsupported) {
	if len(plan.Unsupported) == 0 {
		return plan, nil
	}
	lost := make([]unsupported, len(plan.Unsupported))
	byDev := map[uint64]*unsupported{}
	for i, u := range plan.Unsupported {
		lost[i].err = u
		byDev[u.Dev] = &lost[i]
	}
	out := dedup.Plan{Mode: plan.Mode, Shared: plan.Shared, NoBlocks: plan.NoBlocks}
	for _, g := range plan.Groups {
		if u := byDev[g.Dev]; u != nil {
			u.groups++
			u.actions += len(g.Actions)
			u.frees += g.Frees
			continue
		}
		out.Add(g)
	}
	return out, lost
}

// sendPlan sends the plan and then its groups, those freeing the most
// first, as many as asked.
func sendPlan(plan dedup.Plan, lost []unsupported, req api.DedupRequest, send func(api.DedupEvent) error) error {
	ev := api.DedupPlan{Mode: plan.Mode.String(), DryRun: req.DryRun, Groups: len(plan.Groups), Actions: plan.Actions,
		Frees: plan.Frees, AlreadyShared: plan.Shared, NoBlocks: plan.NoBlocks}
	for _, u := range lost {
		ev.Unsupported = append(ev.Unsupported, api.DedupUnsupported{FS: u.err.FS, Path: u.err.Path, Error: u.err.Err.Error(),
			Groups: u.groups, Actions: u.actions, Frees: u.frees})
	}
	if err := send(api.DedupEvent{Plan: &ev}); err != nil {
		return err
	}
	n := req.Groups
	if n < 0 || n > len(plan.Groups) {
		n = len(plan.Groups)
	}
	if n == 0 {
		return nil
	}
	groups := slices.Clone(plan.Groups)
	slices.SortStableFunc(groups, func(a, b dedup.Group) int {
		return cmp.Or(cmp.Compare(b.Frees, a.Frees), bytes.Compare(a.Keeper.Path, b.Keeper.Path))
	})
	for _, g := range groups[:n] {
		ev := api.DedupGroup{Keeper: g.Keeper.Path, Size: g.Size, Frees: g.Frees, Trash: groupTrash(plan.Mode, g, req)}
		for _, a := range g.Actions {
			for _, t := range a.Targets {
				ev.Targets = append(ev.Targets, t.Path)
			}
		}
		if err := send(api.DedupEvent{Group: &ev}); err != nil {
			return err
		}
	}
	return nil
}

func fillResult(res *api.DedupResult, out dedup.Result) {
	res.Done, res.Freed = out.Done, out.Freed
	for r, n := range out.Skipped {
		if res.Skipped == nil {
			res.Skipped = map[string]int{}
		}
		res.Skipped[string(r)] += n
	}
}

// unsupportedError joins the file systems' errors, as one that matches
// api.ErrUnsupported; nil without any.
func unsupportedError(lost []unsupported) error {
	if len(lost) == 0 {
		return nil
	}
	errs := make([]error, len(lost))
	for i, u := range lost {
		errs[i] = u.err
	}
	return unsupportedErr{errors.Join(errs...)}
}

type unsupportedErr struct{ error }

func (unsupportedErr) Is(target error) bool { return target == api.ErrUnsupported }

func (e unsupportedErr) Unwrap() error { return e.error }

// count adds a run's outcome to the counters of the runs asked for.
func (p *dedupPart) count(out dedup.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked++
	p.done += int64(out.Done)
	p.freed += out.Freed
	for r, n := range out.Skipped {
		p.skips[r] += int64(n)
	}
}

// status is deduplication for the daemon's status: the runs asked for and
// the background mode's counts together.
func (p *dedupPart) status() *api.DedupStatus {
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
func (p *dedupPart) pausedNow(paused string) string {
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

// dedupCollector exports the counts of the runs asked for:
// annexd_dedup_requested_*. The background mode has its own collector.
type dedupCollector struct{ p *dedupPart }

var (
	descAskedRuns  = prometheus.NewDesc("annexd_dedup_requested_runs_total", "Deduplication runs asked for through the API (dry runs included).", nil, nil)
	descAskedFreed = prometheus.NewDesc("annexd_dedup_requested_freed_bytes_total", "Bytes freed by deduplication runs asked for.", nil, nil)
	descAskedPairs = prometheus.NewDesc("annexd_dedup_requested_pairs_total", "Files made to share a keeper's storage by runs asked for.", nil, nil)
	descAskedSkips = prometheus.NewDesc("annexd_dedup_requested_skipped_total", "Actions of runs asked for that were skipped, by reason.", []string{"reason"}, nil)
)

func (c dedupCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAskedRuns, descAskedFreed, descAskedPairs, descAskedSkips} {
		ch <- d
	}
}

func (c dedupCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descAskedRuns, prometheus.CounterValue, float64(p.asked))
	ch <- prometheus.MustNewConstMetric(descAskedFreed, prometheus.CounterValue, float64(p.freed))
	ch <- prometheus.MustNewConstMetric(descAskedPairs, prometheus.CounterValue, float64(p.done))
	for r, n := range p.skips {
		ch <- prometheus.MustNewConstMetric(descAskedSkips, prometheus.CounterValue, float64(n), string(r))
	}
}
