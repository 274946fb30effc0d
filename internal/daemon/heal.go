package daemon

import (
	"github.com/annexd/annexd/internal/heal"
	"github.com/annexd/annexd/internal/ledger"
)

// setupHeal builds the heal of corrupt files; the audit must exist. The
// hub's copies (heal.Remote) are asked only with [audit] heal = "any";
// until the hub provides one, the Remote is nil: this host only.
func (a *App) setupHeal(writes *ledger.Ledger) {
	keep := a.cfg.Audit.HealKeep.D()
	if keep < 0 {
		keep = 0 // until an accept
	}
	h := heal.New(a.st, a.audit, a.h, heal.Options{Ledger: writes, SyncWrites: a.w.Sync, Keep: keep,
		Logger: a.log.With("part", "heal")})
	a.heal = heal.NewPart(h, a.cfg.Audit.Heal)
}
