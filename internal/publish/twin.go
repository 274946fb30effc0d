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
// replaced; when one of them comes back under a later resend, another
// machine sends it under this publisher's id. It then takes a new id,
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
// this publisher replaced before, back under another resend. An index
// this publisher took the name over from (hub.Previous) is a copy's
// with another id, which the hub refuses while this one is heard: not a
// twin's.
func (p *Publisher) replacing(hub hubwire.State) error {
	local, err := p.st.ChangeLog()
	if err != nil {
		return err
	}
	if !hub.Complete || hub.IndexID == "" || hub.IndexID == local.IndexID.String() || hub.Previous != 0 {
		return nil
	}
	p.mu.Lock()
	epoch, seen := p.replaced[hub.IndexID]
	if !seen || epoch == hub.Epoch {
		p.replaced[hub.IndexID] = hub.Epoch
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	return p.renew(hub)
}

// renew gives this publisher a new instance id, kept in the instance
// file, and returns errTwin.
func (p *Publisher) renew(hub hubwire.State) error {
	p.mu.Lock()
	old := p.self
	p.self = randomInstance()
	err := p.cfg.Instance.renew(p.self)
	p.mu.Unlock()
	p.log.Warn("publish: the hub holds again an index of this host that this publisher replaced: another machine "+
		"publishes under this host's name with this publisher's id; this one takes a new id",
		"index_id", hub.IndexID, "old", fmt.Sprintf("%x", old), "new", fmt.Sprintf("%x", p.selfID()))
	if err != nil {
		return err
	}
	return errTwin
}
