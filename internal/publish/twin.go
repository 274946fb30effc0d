package publish

import (
	"errors"
	"fmt"

	"github.com/annexd/annexd/internal/hubwire"
)

// # Twins
//
// Two copies of one state directory at the same path, on the same boot
// and host name (two containers alike), have one publisher instance: the
// hub cannot refuse one as a rival of the other. Their histories differ,
// so neither mixes into the other's (chain.go), but each replaces the
// other's index at the hub with a whole resend, in turn, for as long as
// both run. A publisher notes the hub's indexes of its host that it
// replaced or left, with the resend epochs it saw of them; when one of
// them comes back under a resend it never saw, another machine sends it
// under this publisher's id. It then takes a new id,
// and from there the hub refuses it while the other is heard, as any
// copy of the machine (hub's claim.go).

// errTwin: a twin was found and this publisher took a new id.
var errTwin = errors.New("publish: another machine publishes under this host's name with this publisher's id " +
	"(a second copy of this machine's state directory, at the same path on the same boot and host name?); " +
	"this one takes a new id and waits while the other is heard. Give each machine its own name and credentials")

func (p *Publisher) selfID() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.self
}

// replacing notes that a whole resend replaces the hub's index in hub,
// when it is another than the index's own now; errTwin when it is one
// this publisher replaced or left before, back under a resend it never
// saw. An index this publisher took the name over from (fromOther: the
// answer named a previous holder, or the index last saw another hold
// it) is a copy's with another id, which the hub refuses while this one
// is heard: not a twin's.
func (p *Publisher) replacing(hub hubwire.State, fromOther bool) error {
	local, err := p.st.ChangeLog()
	if err != nil {
		return err
	}
	if !hub.Complete || hub.IndexID == "" || hub.IndexID == local.IndexID.String() || fromOther {
		return nil
	}
	p.mu.Lock()
	seen, known := p.replaced[hub.IndexID]
	back := known && !seen[hub.Epoch]
	p.mu.Unlock()
	if back {
		return p.renew(hub)
	}
	p.noteReplaced(hub.IndexID, hub.Epoch)
	return nil
}

// noteReplaced remembers index (hex) and resend epochs of it as ones
// this publisher replaced or left. A few indexes are remembered.
func (p *Publisher) noteReplaced(index string, epochs ...uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := p.replaced[index]
	if seen == nil {
		if len(p.replaced) >= 16 {
			clear(p.replaced)
		}
		seen = map[uint64]bool{}
		p.replaced[index] = seen
	}
	for _, e := range epochs {
		if e != 0 {
			seen[e] = true
		}
	}
}

// renew gives this publisher a new instance id, kept in the instance
// file, and returns errTwin.
func (p *Publisher) renew(hub hubwire.State) error {
	old, id := p.selfID(), randomInstance()
	err := p.cfg.Instance.renew(id)
	p.mu.Lock()
	p.self = id
	p.mu.Unlock()
	p.log.Warn("publish: the hub holds again an index of this host that this publisher replaced: another machine "+
		"publishes under this host's name with this publisher's id; this one takes a new id",
		"index_id", hub.IndexID, "epoch", fmt.Sprintf("%x", hub.Epoch), "old", fmt.Sprintf("%x", old), "new", fmt.Sprintf("%x", id))
	if err != nil {
		p.log.Warn("publish: cannot keep the new publisher id; it holds until the daemon stops", "err", err)
	}
	return errTwin
}
