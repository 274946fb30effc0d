package publish

import (
	"errors"
	"fmt"
	"time"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/store"
)

// The publisher keeps its index's own chain (hubwire's chain.go) at one
// change, the anchor, and computes it at a later change from the log's
// entries after the anchor. It resumes only where its chain equals the
// hub's, and takes an ack only when it does: a copy of this host's state
// that published other changes under the same index id and numbers (two
// containers alike, an index restored from a backup while the hub was
// away) shows as another chain, and the index is resent whole under a
// new id. The anchor moves to each change the hub acknowledged, and is
// kept in the index with the hub's mark (held.go); the log is trimmed no
// further than the anchor kept, so the entries after it are always there.

// anchor is the index's chain through change at.
type anchor struct {
	index store.IndexID
	at    uint64
	chain hubwire.Chain
}

// errDiverged: the hub holds another history of this index.
var errDiverged = errors.New("publish: the hub holds another history of this index (a copy of this machine's state " +
	"publishing under its name, or this index restored from a backup); resending it whole under a new index id")

// divergedNote is how long the status warns of a divergence.
const divergedNote = time.Hour

// entryOf is a logged change as a batch carries it.
func entryOf(l *store.Logged) hubwire.Entry {
	return hubwire.Entry{Path: l.Path, Backend: l.Backend, Digest: l.Digest, Size: l.Size}
}

// chainAt returns the index's chain through change seq, computed from the
// anchor; false when it cannot be: no anchor of this index, or one past
// seq, or the entries after it gone.
func (p *Publisher) chainAt(local store.LogState, seq uint64) (hubwire.Chain, bool, error) {
	a := p.anchorNow()
	if a.index != local.IndexID || seq < a.at || seq > local.Seq {
		return hubwire.Chain{}, false, nil
	}
	c, at := a.chain, a.at
	for at < seq {
		changes, _, err := p.st.ChangesAfter(at, min(int(seq-at), 4096))
		if errors.Is(err, store.ErrTrimmed) {
			return hubwire.Chain{}, false, nil
		}
		if err != nil {
			return hubwire.Chain{}, false, err
		}
		if len(changes) == 0 {
			return hubwire.Chain{}, false, nil
		}
		for i := range changes {
			if changes[i].Seq != at+1 {
				return hubwire.Chain{}, false, nil // the log was emptied and numbered on
			}
			e := entryOf(&changes[i])
			c, at = c.Next(&e), at+1
		}
	}
	return c, true, nil
}

func (p *Publisher) anchorNow() anchor {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.anchor
}

// setAnchor moves the anchor; keepHeld writes it to the index.
func (p *Publisher) setAnchor(a anchor) {
	p.mu.Lock()
	if p.anchor != a {
		p.anchor, p.heldDirty = a, true
	}
	p.mu.Unlock()
}

// trimLimit is the last change the log may be trimmed through: the
// anchor kept in the index, when it is of index.
func (p *Publisher) trimLimit(index string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kept.index.String() != index {
		return 0
	}
	return p.kept.at
}

// diverged resets the log, so the next sync resends the index whole under
// a new id, and notes it for the status.
func (p *Publisher) diverged(st hubwire.State, own hubwire.Chain) error {
	p.log.Warn("publish: the hub holds another history of this index; resending it whole under a new index id "+
		"(a copy of this machine's state under its name, or the index restored from a backup)",
		"hub_seq", st.Seq, "hub_chain", st.Chain.String(), "chain", own.String())
	p.mu.Lock()
	p.divergedAt = time.Now()
	p.mu.Unlock()
	if err := p.st.ResetChanges(); err != nil {
		return err
	}
	return errDiverged
}

// divergedText is the status's warning of a divergence at t.
func divergedText(t time.Time) string {
	return fmt.Sprintf("at %s the hub held another history of this host's index (a copy of this machine's state "+
		"publishing under its name, or the index restored from a backup); it was resent whole", t.Format(time.RFC3339))
}

// check compares the hub's chain in st with the index's own and moves the
// anchor there when they agree. A state of another index, incomplete, or
// that cannot be checked (older than the anchor: a late answer) is left
// to sync; errDiverged when the chains differ.
func (l *link) check(st hubwire.State) error {
	p := l.p
	local, err := p.st.ChangeLog()
	if err != nil {
		return err
	}
	if !st.Complete || st.IndexID != local.IndexID.String() || st.Seq > local.Seq {
		return nil
	}
	own, ok, err := p.chainAt(local, st.Seq)
	switch {
	case err != nil:
		return err
	case !ok:
		return nil
	case !st.Chain.IsZero() && own != st.Chain:
		return p.diverged(st, own)
	}
	p.setAnchor(anchor{index: local.IndexID, at: st.Seq, chain: own})
	return nil
}

// checkAck checks the hub's last ack, once: between batches while the
// log has more, so the anchor, and the trimming behind it, keep up.
func (l *link) checkAck() error {
	st := l.lastAck()
	if st.IndexID == l.checked.IndexID && st.Seq == l.checked.Seq && st.Chain == l.checked.Chain {
		return nil
	}
	l.checked = st
	return l.check(st)
}

// resumeChain returns the chain at hub.Seq the log resumes from, or
// whole when it cannot resume there: the chains differ (the log is reset,
// so the resend takes a new index id), or the index's chain cannot be
// computed there. An index that keeps no chain yet (made by an older
// version) takes the hub's, or starts one.
func (l *link) resumeChain(local store.LogState, hub hubwire.State) (c hubwire.Chain, whole bool, err error) {
	p := l.p
	own, ok, err := p.chainAt(local, hub.Seq)
	switch {
	case err != nil:
		return c, false, err
	case ok && !hub.Chain.IsZero() && own != hub.Chain:
		if err := p.diverged(hub, own); !errors.Is(err, errDiverged) {
			return c, false, err
		}
		return c, true, nil
	case ok:
		c = own
	case p.anchorNow().index != local.IndexID:
		c = hub.Chain
		if c.IsZero() {
			c = hubwire.ChainStart(local.IndexID, 0, hub.Seq)
		}
		p.log.Info("publish: this index keeps no chain of its changes yet; taking the hub's", "seq", hub.Seq)
	default:
		p.log.Warn("publish: the hub holds less of this index than it acknowledged before; resending it whole",
			"hub_seq", hub.Seq, "anchor", p.anchorNow().at)
		return c, true, nil
	}
	p.setAnchor(anchor{index: local.IndexID, at: hub.Seq, chain: c})
	return c, false, nil
}
