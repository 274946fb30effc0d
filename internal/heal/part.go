package heal

import (
	"context"
	"time"

	"github.com/annexd/annexd/api"
)

// Part is heal as the daemon runs it: the heals asked for through the
// API (api.AuditHealer), and after each audit pass what [audit] heal
// says: "off" nothing, "ask" a dry run that logs what could be healed,
// "local" and "any" a heal (the Healer's Remote is set only for "any").
type Part struct {
	h    *Healer
	mode string
	kick chan struct{}
}

var _ api.AuditHealer = (*Part)(nil)

// NewPart returns the daemon's heal part over h in mode.
func NewPart(h *Healer, mode string) *Part {
	return &Part{h: h, mode: mode, kick: make(chan struct{}, 1)}
}

// Passed tells the part an audit pass completed (audit.Options.OnPass).
// It does not block.
func (p *Part) Passed() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run settles the heals a crash cut short, then acts after each pass
// and removes rotten bytes past their retention daily, until ctx ends.
func (p *Part) Run(ctx context.Context) error {
	if err := p.h.Recover(ctx); err != nil {
		p.h.log.Error("heal recovery incomplete", "err", err)
	}
	p.h.expire(ctx)
	day := time.NewTicker(24 * time.Hour)
	defer day.Stop()
	var again retries
	for {
		select {
		case <-ctx.Done():
			again.stop()
			return nil
		case <-day.C:
			p.h.expire(ctx)
		case <-p.kick:
			if p.mode != "off" {
				again.reset(p.heal(ctx, nil))
			}
		case <-again.c:
			again.next(p.heal(ctx, again.paths))
		}
	}
}

// heal heals (or in "ask" mode plans) the findings under paths (none:
// all), and returns the files worth trying again.
func (p *Part) heal(ctx context.Context, paths [][]byte) [][]byte {
	out, err := p.h.Heal(ctx, paths, p.mode == "ask")
	if err != nil && ctx.Err() == nil {
		p.h.log.Warn("heal after an audit pass failed", "err", err)
	}
	var again [][]byte
	for _, f := range out {
		if f.Again {
			again = append(again, f.Path)
		}
	}
	return again
}

// retryWaits are the waits before the heals after a pass are tried again
// for the files that could not be healed for a passing reason (busy, the
// hub not connected); then they wait for the next pass.
var retryWaits = []time.Duration{15 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour}

// retries is the timer of the next try and the files it is for.
type retries struct {
	t     *time.Timer
	c     <-chan time.Time // nil: no try due
	paths [][]byte
	n     int // tries made since the pass
}

// reset starts over after a pass with the files it left to try again.
func (r *retries) reset(paths [][]byte) {
	r.n = 0
	r.next(paths)
}

// next schedules the next try for paths, if any and tries are left.
func (r *retries) next(paths [][]byte) {
	r.stop()
	if len(paths) == 0 || r.n >= len(retryWaits) {
		return
	}
	r.paths, r.t = paths, time.NewTimer(retryWaits[r.n])
	r.c = r.t.C
	r.n++
}

func (r *retries) stop() {
	if r.t != nil {
		r.t.Stop()
	}
	r.t, r.c, r.paths = nil, nil, nil
}

// AuditHeal implements api.AuditHealer.
func (p *Part) AuditHeal(ctx context.Context, req api.AuditHealRequest) (api.AuditHealResult, error) {
	fs, err := p.h.Heal(ctx, req.Paths, req.DryRun)
	if err != nil {
		return api.AuditHealResult{}, err
	}
	out := api.AuditHealResult{Files: make([]api.AuditHealFile, len(fs))}
	for i, f := range fs {
		out.Files[i] = api.AuditHealFile{Path: f.Path, Key: f.Key, Outcome: f.Outcome, Source: f.Source, Host: f.Host,
			Aside: f.Aside, Reason: f.Reason}
	}
	return out, nil
}
