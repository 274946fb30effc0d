package hub

import (
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/internal/hubwire"
)

// # One publisher a host
//
// Credentials name a host, not a machine: a cloned virtual machine, or a
// configuration copied to a second machine, publishes under the same
// name, index id and sequence numbers as the host, with other changes.
// Applied both, the view would hold a mix of two indexes that neither
// has, and each would trim its log on the other's acks. So each publisher
// names itself with an instance (hubwire.StateRequest), and the view
// takes a host's changes from one instance at a time: the one that holds
// the name. A state request from another instance takes the name over
// only once the holder has not been heard for claimLease (stopped, or
// gone with its machine); until then it is refused, and so are its
// batches, counted under RefuseRival and DropRival. The answer to the
// request that takes the name over names the instance it took it from
// (State.Previous), so the new holder can tell whether what the hub has
// is its own history (publish resends its index whole when not). Both
// publishers hear of the other (State.Rival). A publisher without an
// instance (an older version) is not checked.

// claimLease is how long an instance holds its host's name after it was
// last heard. A publisher asks for its state at least every
// hubwire.MaxHeartbeat, and with each batch it is heard.
const claimLease = hubwire.ClaimLease

// Reasons for the rival's batches and requests.
const (
	// DropRival: a batch from another publisher than the one that holds
	// the host's name.
	DropRival = "rival_publisher"
	// RefuseRival: a state request from another publisher than the one
	// that holds the host's name; it is answered, as a refusal.
	RefuseRival = "rival_publisher"
)

// claim decides whether the publisher inst of host name may publish, and
// returns the state to answer it with. A request from the holder, from a
// publisher without an instance, or one that finds the name free (never
// held, or its holder silent for claimLease) holds; it counts as hearing
// from the host. Another is refused and noted as a rival.
func (v *view) claim(name string, inst uint64) (hubwire.State, bool, error) {
	if inst == 0 {
		v.heard(name)
		return v.state(name), true, nil
	}
	v.mu.Lock()
	holder, seen := uint64(0), time.Time{}
	if h, ok := v.hosts[name]; ok {
		holder, seen = h.Instance, v.seenLocked(h)
	}
	v.mu.Unlock()
	switch {
	case holder == inst:
		v.heard(name)
		return v.state(name), true, nil
	case holder != 0 && v.now().Sub(seen) <= claimLease:
		v.noteRival(name)
		return v.state(name), false, nil
	}
	var prev uint64
	err := v.update(func(_ *bolt.Tx, get func(string) (*hostRec, error)) error {
		h, err := get(name)
		if err != nil {
			return err
		}
		prev, h.Instance, h.LastSeen = h.Instance, inst, v.now()
		return nil
	})
	if err == nil {
		v.mu.Lock()
		delete(v.rivals, name) // what spoke as a rival until now holds the name
		v.mu.Unlock()
	}
	if err != nil {
		return hubwire.State{}, false, err
	}
	if prev != 0 {
		v.log.Warn("hub: another publisher took over this host's name: the one that held it was not heard for "+
			claimLease.String(), "host", name, "from", strconv.FormatUint(prev, 16), "to", strconv.FormatUint(inst, 16))
	}
	st := v.state(name)
	st.Previous = prev
	return st, true, nil
}

// fromHolder reports whether a batch from publisher inst of host name is
// the holder's: it is, or no instance is known on either side.
func (v *view) fromHolder(name string, inst uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	h, ok := v.hosts[name]
	if inst == 0 || !ok || h.Instance == 0 || h.Instance == inst {
		return true
	}
	v.rivals[name] = v.now()
	return false
}

// noteRival notes that another publisher than the holder spoke as name.
func (v *view) noteRival(name string) {
	v.mu.Lock()
	v.rivals[name] = v.now()
	v.mu.Unlock()
}

// instanceOf parses the instance of a batch's header; 0 when absent.
func instanceOf(hex string) uint64 {
	n, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		return 0
	}
	return n
}
