package publish

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/store"
)

// What the hub last held of this host (hubwire.State: the publisher that
// held the name, and the last change it had applied) is kept in the
// index's meta, written with the index's own commits, and so is the
// index's chain anchor (chain.go). A copy of the index
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

// loadHeld reads heldMeta: the hub's mark, and the index's chain anchor
// (chain.go) when it was kept with it; zero when the index has none.
func loadHeld(st Store) (heldMark, anchor) {
	var (
		h heldMark
		a anchor
	)
	if st == nil {
		return h, a
	}
	v, ok, err := st.GetMeta(heldMeta)
	if err != nil || !ok {
		return h, a
	}
	var index, chain, epochs string
	n, _ := fmt.Sscanf(string(v), "%x %d %s %d %s %s", &h.id, &h.seq, &index, &a.at, &chain, &epochs)
	if n < 2 {
		return heldMark{}, anchor{}
	}
	id, err1 := store.ParseIndexID(index)
	c, err2 := hubwire.ParseChain(chain)
	if n < 6 || err1 != nil || err2 != nil || c.IsZero() || !parseEpochs(epochs, &a.epochs) {
		return h, anchor{} // written before chains, or damaged
	}
	a.index, a.chain = id, c
	return h, a
}

// parseEpochs reads the epochs heldValue wrote.
func parseEpochs(s string, out *[4]uint64) bool {
	for i, f := range strings.Split(s, ",") {
		e, err := strconv.ParseUint(f, 16, 64)
		if err != nil || i >= len(out) || e == 0 {
			return false
		}
		out[i] = e
	}
	return true
}

// heldValue is what heldMeta holds: the mark, then the anchor's index,
// change, chain and epochs (the latest first).
func heldValue(h heldMark, a anchor) []byte {
	if a.chain.IsZero() || a.epochs[0] == 0 {
		return fmt.Appendf(nil, "%x %d", h.id, h.seq)
	}
	var es []string
	for _, e := range a.epochs {
		if e != 0 {
			es = append(es, strconv.FormatUint(e, 16))
		}
	}
	return fmt.Appendf(nil, "%x %d %s %d %s %s", h.id, h.seq, a.index, a.at, a.chain, strings.Join(es, ","))
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
			_ = p.writeHeld(ctx)
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = p.writeHeld(wctx)
			cancel()
			return
		}
	}
}

// writeHeld writes heldMeta when it changed; one write at a time, so the
// value kept is never older than one written before.
func (p *Publisher) writeHeld(ctx context.Context) error {
	p.heldW.Lock()
	defer p.heldW.Unlock()
	p.mu.Lock()
	h, a, dirty := p.held, p.anchor, p.heldDirty
	p.heldDirty = false
	p.mu.Unlock()
	if !dirty {
		return nil
	}
	if err := p.st.PutMeta(ctx, heldMeta, heldValue(h, a)); err != nil {
		p.mu.Lock()
		p.heldDirty = true
		p.mu.Unlock()
		p.log.Warn("publish: cannot note what the hub holds of this host", "err", err)
		return err
	}
	if !a.chain.IsZero() && a.epochs[0] != 0 { // heldValue wrote it
		p.mu.Lock()
		p.kept = a
		p.mu.Unlock()
	}
	return nil
}
