package deduppart

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/dedup"
)

// progressEvery is the least time between two progress events of a run.
const progressEvery = 200 * time.Millisecond

// Dedup plans a run, reports the plan and, unless it is a dry run,
// carries it out (api.Deduper).
func (p *Part) Dedup(ctx context.Context, req api.DedupRequest, send func(api.DedupEvent) error) (api.DedupResult, error) {
	p.running.Add(1)
	defer p.running.Add(-1)
	p.onRun()
	return p.run(ctx, req, send)
}

// run plans, reports the plan and, unless it is a dry run, carries it out.
func (p *Part) run(ctx context.Context, req api.DedupRequest, send func(api.DedupEvent) error) (api.DedupResult, error) {
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
func (p *Part) apply(ctx context.Context, plan dedup.Plan, dr dedup.Request, progress bool, send func(api.DedupEvent) error) (dedup.Result, error) {
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
