package publish

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/store"
)

// The publisher keeps its index's own chain (hubwire's chain.go) at one
// change, the anchor, and computes it at a later change from the log's
// entries after the anchor. It resumes only where its chain equals the
// hub's, and counts a change as acknowledged only then: a copy of this
// host's state that published other changes under the same index id and
// numbers (two containers alike, an index restored from a backup while
// the hub was away) shows as another chain, and the index is resent
// whole under a new id. The anchor moves to each change the hub
// acknowledged, and is kept in the index with the hub's mark (held.go);
// the log is trimmed no further than the anchor kept.
//
// A chain starts at a whole resend, so the anchor also keeps the epochs
// of this index's own last resends. A hub (or one node of a hub cluster)
// whose state has an older one of them has not applied the latest resend
// yet: the publisher asks again, and resends whole if that persists. An
// epoch that is not the index's own is another machine's resend of it.

// anchor is the index's chain through change at. epochs are the index's
// own resends, the latest first: its chain starts at epochs[0]'s.
type anchor struct {
	index  store.IndexID
	at     uint64
	chain  hubwire.Chain
	epochs [4]uint64
}

// own reports whether epoch is one of the index's own resends.
func (a *anchor) own(epoch uint64) bool {
	for _, e := range a.epochs {
		if e != 0 && e == epoch {
			return true
		}
	}
	return false
}

// started returns a's epochs with epoch first, and prior (the hub's
// resend this one replaces; 0: none) among them: a state of the hub's
// still showing it is from before the resend, not another machine's.
func (a *anchor) started(epoch, prior uint64) [4]uint64 {
	es := [4]uint64{epoch}
	rest := es[1:]
	if prior != 0 && !a.own(prior) {
		es[1], rest = prior, es[2:]
	}
	copy(rest, a.epochs[:])
	return es
}

// Errors of the chain.
var (
	// errDiverged: the hub holds another history of this index.
	errDiverged = errors.New("publish: the hub holds another history of this index (a copy of this machine's state " +
		"publishing under its name, or this index restored from a backup); resending it whole under a new index id")
	// errBehind: the hub's state is older than what it acknowledged of
	// this index before (one node of a cluster behind the others).
	errBehind = fmt.Errorf("%w: its state is older than what it acknowledged before; asking again", ErrHubLost)
)

// behindTries is how many syncs in a row may find the hub behind before
// the index is resent whole.
const behindTries = 3

// divergedNote is how long the status warns of a divergence.
const divergedNote = time.Hour

// entryOf is a logged change as a batch carries it.
func entryOf(l *store.Logged) hubwire.Entry {
	return hubwire.Entry{Path: l.Path, Backend: l.Backend, Digest: l.Digest, Size: l.Size}
}

// chainAt returns the index's chain through change seq, computed from the
// anchor; false when it cannot be: no anchor of this index, or one past
// seq, or the entries after it gone (the log emptied).
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

// anchored reports whether the anchor is of index (hex).
func (p *Publisher) anchored(index string) bool {
	return p.anchorNow().index.String() == index
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

// acked counts the changes through st.Seq as applied by the hub, once
// its chain there was checked.
func (p *Publisher) acked(st hubwire.State) {
	p.mu.Lock()
	if st.IndexID == p.stat.IndexID && st.Seq > p.stat.Acked {
		p.stat.Acked, p.stat.LastAck = st.Seq, time.Now()
	}
	p.behind = 0
	p.mu.Unlock()
}

// resetIndex gives the index a new id, so the next sync resends it whole,
// and remembers the one it leaves with its resends and the hub's (twin.go).
func (p *Publisher) resetIndex(hub hubwire.State) error {
	local, err := p.st.ChangeLog()
	if err != nil {
		return err
	}
	a := p.anchorNow()
	var epochs []uint64
	if a.index == local.IndexID {
		epochs = append(epochs, a.epochs[:]...)
	}
	if hub.IndexID == local.IndexID.String() {
		epochs = append(epochs, hub.Epoch)
	}
	p.noteReplaced(local.IndexID.String(), epochs...)
	return p.st.ResetChanges()
}

// diverged resets the index (resetIndex) and notes it for the status.
func (p *Publisher) diverged(st hubwire.State, own hubwire.Chain) error {
	p.log.Warn("publish: the hub holds another history of this index; resending it whole under a new index id "+
		"(a copy of this machine's state under its name, or the index restored from a backup)",
		"hub_seq", st.Seq, "hub_epoch", fmt.Sprintf("%x", st.Epoch), "hub_chain", st.Chain.String(), "chain", own.String())
	p.noteDiverged()
	if err := p.resetIndex(st); err != nil {
		return err
	}
	return errDiverged
}

// noteDiverged notes for the status that the hub held another history of
// the index (divergedText).
func (p *Publisher) noteDiverged() {
	p.mu.Lock()
	p.divergedAt = time.Now()
	p.mu.Unlock()
}

// divergedText is the status's warning of a divergence at t.
func divergedText(t time.Time) string {
	return fmt.Sprintf("at %s the hub held another history of this host's index (a copy of this machine's state "+
		"publishing under its name, or the index restored from a backup); it was resent whole", t.Format(time.RFC3339))
}

// check compares the hub's chain in st with the index's own and, when
// they agree, moves the anchor there and counts the changes through it
// as acknowledged. A state of another index, incomplete, from before the
// anchor or from before the index's latest resend (a late answer, a
// cluster node behind) is left to sync; errDiverged when the hub holds
// another machine's resend or changes of this index.
func (l *link) check(st hubwire.State) error {
	p := l.p
	local, err := p.st.ChangeLog()
	if err != nil {
		return err
	}
	a := p.anchorNow()
	if !st.Complete || st.IndexID != local.IndexID.String() || st.Seq > local.Seq || a.index != local.IndexID {
		return nil
	}
	if st.Epoch != a.epochs[0] {
		if a.own(st.Epoch) {
			return nil
		}
		return p.diverged(st, hubwire.Chain{})
	}
	own, ok := l.sentChain(st.Seq, a)
	if !ok {
		own, ok, err = p.chainAt(local, st.Seq)
	}
	switch {
	case err != nil:
		return err
	case !ok:
		return nil
	case !st.Chain.IsZero() && own != st.Chain:
		return p.diverged(st, own)
	}
	a.at, a.chain = st.Seq, own
	p.setAnchor(a)
	p.acked(st)
	return nil
}

// sentChain returns the chain at seq as follow computed it when it
// published the batch ending there, so an ack of it costs no second read
// and hash of the batch's changes; false when seq is no batch's end
// since the anchor. The ends up to seq are forgotten.
func (l *link) sentChain(seq uint64, a anchor) (hubwire.Chain, bool) {
	c, ok := l.sent[seq]
	for s := range l.sent {
		if s <= seq {
			delete(l.sent, s)
		}
	}
	return c, ok && seq >= a.at
}

// checkAck checks the hub's last ack, once: between batches while the
// log has more, so the anchor, and the trimming behind it, keep up.
func (l *link) checkAck() error {
	st := l.lastAck()
	if st.IndexID == l.checked.IndexID && st.Seq == l.checked.Seq && st.Epoch == l.checked.Epoch && st.Chain == l.checked.Chain {
		return nil
	}
	l.checked = st
	return l.check(st)
}

// resumeChain returns the chain at hub.Seq the log resumes from, or
// whole when it cannot resume there: the chains differ (the index is
// reset, so the resend takes a new id), or the hub stayed behind the
// index's latest resend or anchor for behindTries syncs. An index that
// keeps no chain yet (made by an older version) takes the hub's when the
// hub is where the index's mark last saw it.
func (l *link) resumeChain(local store.LogState, hub hubwire.State) (c hubwire.Chain, whole bool, err error) {
	p := l.p
	a := p.anchorNow()
	if a.index != local.IndexID {
		if l.heldBefore.seq != hub.Seq {
			// Without a chain, the hub's mark in the index is all there
			// is: a hub with other changes than it last acknowledged to
			// this index (one restored from a backup) is not taken.
			p.log.Warn("publish: no chain of this index's changes is kept yet, and the hub holds other changes "+
				"than it last acknowledged to it; resending it whole", "hub_seq", hub.Seq, "acknowledged", l.heldBefore.seq)
			return c, true, nil
		}
		c = hub.Chain
		if c.IsZero() {
			c = hubwire.ChainStart(local.IndexID, hub.Epoch, hub.Seq)
		}
		p.log.Info("publish: no chain of this index's changes is kept yet (an index from an older version); taking the hub's",
			"seq", hub.Seq)
		p.setAnchor(anchor{index: local.IndexID, at: hub.Seq, chain: c, epochs: [4]uint64{hub.Epoch}})
		p.acked(hub)
		return c, false, nil
	}
	if hub.Epoch != a.epochs[0] && !a.own(hub.Epoch) {
		whole, err := p.divergedWhole(hub, hubwire.Chain{})
		return c, whole, err
	}
	own, ok, err := p.chainAt(local, hub.Seq)
	switch {
	case err != nil:
		return c, false, err
	case hub.Epoch != a.epochs[0] && p.awaiting(hub):
		return c, false, errBehind // the latest resend still in the hub's queue
	case hub.Epoch != a.epochs[0] || !ok:
		if err := p.behindHub(hub, a); err != nil {
			return c, false, err
		}
		return c, true, nil
	case !hub.Chain.IsZero() && own != hub.Chain:
		whole, err := p.divergedWhole(hub, own)
		return c, whole, err
	}
	a.at, a.chain = hub.Seq, own
	p.setAnchor(a)
	p.acked(hub)
	return own, false, nil
}

// divergedWhole is diverged for resumeChain: true when the index was
// reset, to be resent whole.
func (p *Publisher) divergedWhole(hub hubwire.State, own hubwire.Chain) (bool, error) {
	if err := p.diverged(hub, own); !errors.Is(err, errDiverged) {
		return false, err
	}
	return true, nil
}

// behindHub counts a sync that found the hub behind the index's latest
// resend or anchor: errBehind, to ask again, until behindTries; then nil,
// to resend whole.
func (p *Publisher) behindHub(hub hubwire.State, a anchor) error {
	p.mu.Lock()
	p.behind++
	n := p.behind
	if n >= behindTries {
		p.behind = 0
	}
	p.mu.Unlock()
	if n < behindTries {
		return errBehind
	}
	p.log.Warn("publish: the hub holds less of this index than it acknowledged before (its view restored?); resending it whole",
		"hub_seq", hub.Seq, "hub_epoch", fmt.Sprintf("%x", hub.Epoch), "anchor", a.at, "epoch", fmt.Sprintf("%x", a.epochs[0]))
	return nil
}

// resent makes the resend epoch of index, which reflects its changes
// through seq and replaces the hub's resend prior, the anchor, and writes
// it to the index before the resend ends: a restart that finds the hub
// with it then knows it for its own.
func (p *Publisher) resent(ctx context.Context, index store.IndexID, epoch, prior, seq uint64) hubwire.Chain {
	a := p.anchorNow()
	if a.index != index {
		a = anchor{index: index}
	}
	c := hubwire.ChainStart(index, epoch, seq)
	p.setAnchor(anchor{index: index, at: seq, chain: c, epochs: a.started(epoch, prior)})
	_ = p.writeHeld(ctx) // logged; the mark follows with the next write
	p.mu.Lock()
	p.resentAt, p.resentSeen = time.Now(), false
	p.mu.Unlock()
	return c
}

// resendPatience is how long after a whole resend was sent the hub may
// take to apply it before the publisher counts it as stalled or behind:
// the stream has it, and the hub applies one batch at a time, behind the
// other hosts'.
const resendPatience = 30 * time.Minute

// awaiting reports whether the hub has not yet shown the index's latest
// resend applied, sent less than resendPatience ago: an older state of
// the index, or another index, in st is then its queue, not a stall. Once
// a state showed it applied (heard, sawResend), later ones are the hub's
// word again.
func (p *Publisher) awaiting(st hubwire.State) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	latest := p.anchor.epochs[0]
	if latest == 0 || p.resentSeen || time.Since(p.resentAt) >= resendPatience {
		return false
	}
	return !(st.Complete && st.IndexID == p.anchor.index.String() && st.Epoch == latest)
}

// sawResend notes, under p.mu, a state that shows the latest resend
// applied.
func (p *Publisher) sawResend(st hubwire.State) {
	if st.Complete && st.IndexID == p.anchor.index.String() && st.Epoch != 0 && st.Epoch == p.anchor.epochs[0] {
		p.resentSeen = true
	}
}
