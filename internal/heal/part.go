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
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-day.C:
			p.h.expire(ctx)
		case <-p.kick:
			if p.mode == "off" {
				continue
			}
			if _, err := p.h.Heal(ctx, nil, p.mode == "ask"); err != nil && ctx.Err() == nil {
				p.h.log.Warn("heal after an audit pass failed", "err", err)
			}
		}
	}
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
