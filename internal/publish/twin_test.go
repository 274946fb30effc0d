package publish

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/annexd/annexd/internal/hubwire"
)

// An index of the hub's that the publisher replaced is a twin's only
// when it comes back under another resend: the same resend again (a
// hub node that has not applied the replacement yet) is not. The new id
// is kept in the instance file.
func TestAReplacedIndexBackMakesANewInstance(t *testing.T) {
	st := openLogged(t, 1)
	path := filepath.Join(t.TempDir(), "host-id-publisher")
	inst, err := LoadInstance(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(st, Config{Name: "h", HostID: [16]byte{1}, URL: "nats://127.0.0.1:1", Instance: inst})
	if err != nil {
		t.Fatal(err)
	}
	local, _ := st.ChangeLog()
	other := hubwire.State{Name: "h", Complete: true, IndexID: "0123456789abcdef0123456789abcdef", Epoch: 5}
	own := hubwire.State{Name: "h", Complete: true, IndexID: local.IndexID.String(), Epoch: 9}
	for _, s := range []hubwire.State{other, other, own, {Name: "h"}} {
		if err := p.replacing(s, false); err != nil {
			t.Fatalf("replacing %+v: %v", s, err)
		}
	}
	first := p.selfID()
	other.Epoch = 6
	if err := p.replacing(other, true); err != nil {
		t.Fatalf("an index taken over from a copy with another id: %v", err)
	}
	// An index the publisher left with two resends of its own, back with
	// the older one (the hub's view restored from a backup): not a twin's.
	left := hubwire.State{Name: "h", Complete: true, IndexID: "fedcba9876543210fedcba9876543210", Epoch: 7}
	p.noteReplaced(left.IndexID, 7, 8)
	if err := p.replacing(left, false); err != nil || p.selfID() != first {
		t.Fatalf("an index this publisher left, back with its own resend: %v", err)
	}
	if err := p.replacing(other, false); !errors.Is(err, errTwin) {
		t.Fatalf("a replaced index back under another resend: %v", err)
	}
	if p.selfID() == first {
		t.Fatal("the instance kept its id")
	}
	again, err := LoadInstance(path)
	if err != nil || again.ID != p.selfID() {
		t.Fatalf("the instance file holds %x (%v), the publisher %x", again.ID, err, p.selfID())
	}
}
