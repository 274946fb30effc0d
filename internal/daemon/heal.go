package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/annexd/annexd/internal/heal"
	"github.com/annexd/annexd/internal/hubcopy"
	"github.com/annexd/annexd/internal/hublink"
	"github.com/annexd/annexd/internal/ledger"
)

// setupHeal builds the heal of corrupt files; the audit must exist. The
// hub's copies (heal.Remote) are asked only with [audit] heal = "any" and
// a hub link; otherwise this host only.
func (a *App) setupHeal(writes *ledger.Ledger) {
	keep := a.cfg.Audit.HealKeep.D()
	if keep < 0 {
		keep = 0 // until an accept
	}
	var remote heal.Remote
	if a.link != nil && a.cfg.Audit.Heal == "any" {
		remote = hubCopies{a.link}
	}
	h := heal.New(a.st, a.audit, a.h, heal.Options{Remote: remote, Ledger: writes, SyncWrites: a.w.Sync, Keep: keep,
		Logger: a.log.With("part", "heal")})
	a.heal = heal.NewPart(h, a.cfg.Audit.Heal)
}

// hubCopies is heal's Remote over the hub link: the link's copier, once
// the link is up.
type hubCopies struct{ link *hublink.Link }

var _ heal.Lister = hubCopies{}

// errHubDown: the link has no copier yet, or its connection is down;
// the heal tries again later (heal.ErrUnreachable).
var errHubDown = fmt.Errorf("%w: the hub is not connected", heal.ErrUnreachable)

func (r hubCopies) Fetch(ctx context.Context, key string, w io.Writer) (string, error) {
	c := r.link.Remote()
	if c == nil {
		return "", errHubDown
	}
	host, err := c.Fetch(ctx, key, w)
	switch {
	case errors.Is(err, hubcopy.ErrUnanswered):
		// A holder was offline or busy: the heal tries again later.
		err = fmt.Errorf("%w: %w", heal.ErrUnreachable, err)
	case errors.Is(err, hubcopy.ErrNoCopy):
		err = fmt.Errorf("%w: %w", heal.ErrNoCopy, err)
	case errors.Is(err, hubcopy.ErrLink):
		err = errHubDown
	}
	return host, err
}

// Holders lists the other hosts the hub says hold key (heal.Lister).
func (r hubCopies) Holders(ctx context.Context, key string) ([]string, error) {
	c := r.link.Remote()
	if c == nil {
		return nil, errHubDown
	}
	hosts, err := c.Holders(ctx, key)
	if errors.Is(err, hubcopy.ErrLink) {
		err = errHubDown
	}
	return hosts, err
}
