package publish

import (
	"context"
	"fmt"
	"time"
)

// What the hub last held of this host (hubwire.State: the publisher that
// held the name, and the last change it had applied) is kept in the
// index's meta, written with the index's own commits. A copy of the index
// (a cloned machine's) then never claims to hold more than it does: the
// hub acknowledged those changes after the index committed them. A
// publisher that takes the host's name over from another finds the hub
// with its own history only when both numbers match; else it resends the
// index whole.

// heldMeta is the index's meta name of the hub's last word on this host.
const heldMeta = "publish.held"

// heldEvery spaces the writes of heldMeta while acks come in; the last
// one is written once they stop, and when the publisher stops.
const heldEvery = 2 * time.Second

// heldMark is the publisher that held the name and the hub's last change.
type heldMark struct{ id, seq uint64 }

// loadHeld reads heldMeta; zero when the index has none.
func loadHeld(st Store) heldMark {
	var h heldMark
	if st == nil {
		return h
	}
	v, ok, err := st.GetMeta(heldMeta)
	if err != nil || !ok {
		return h
	}
	if _, err := fmt.Sscanf(string(v), "%x %d", &h.id, &h.seq); err != nil {
		return heldMark{}
	}
	return h
}

// noteHeld takes the hub's word that publisher id holds the host through
// change seq.
func (p *Publisher) noteHeld(id, seq uint64) {
	p.mu.Lock()
	if p.held != (heldMark{id, seq}) {
		p.held, p.heldDirty = heldMark{id, seq}, true
	}
	p.mu.Unlock()
}

// lastHeld returns what the hub last held.
func (p *Publisher) lastHeld() heldMark {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// keepHeld writes heldMeta every heldEvery while it changes, and once
// more when ctx ends.
func (p *Publisher) keepHeld(ctx context.Context) {
	t := time.NewTicker(heldEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			p.writeHeld(ctx)
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			p.writeHeld(wctx)
			cancel()
			return
		}
	}
}

func (p *Publisher) writeHeld(ctx context.Context) {
	p.mu.Lock()
	h, dirty := p.held, p.heldDirty
	p.heldDirty = false
	p.mu.Unlock()
	if !dirty {
		return
	}
	if err := p.st.PutMeta(ctx, heldMeta, fmt.Appendf(nil, "%x %d", h.id, h.seq)); err != nil {
		p.mu.Lock()
		p.heldDirty = true
		p.mu.Unlock()
		p.log.Warn("publish: cannot note what the hub holds of this host", "err", err)
	}
}
