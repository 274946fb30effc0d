package publish

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// openLogged opens a real index that keeps a change log, with its writer
// running, and puts n files in it.
func openLogged(t *testing.T, n int) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "index.db"), store.Options{NoSync: true, Changes: true, MaxDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		st.Close()
	})
	for i := range n {
		d := sha256.Sum256(fmt.Appendf(nil, "file %d", i))
		r := store.Record{Backend: key.SHA256E, Digest: d[:], Size: int64(i), Ino: uint64(i + 1), HashedAt: time.Now().UnixNano()}
		if err := st.Put(ctx, fmt.Appendf(nil, "/t/f%03d", i), r); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// The chain at a change is computed from the anchor and the log after
// it, as the hub computes it from the batches; it cannot be before the
// anchor, past the log, or once the entries after the anchor are gone.
func TestChainAtFollowsTheLog(t *testing.T) {
	st := openLogged(t, 6)
	local, err := st.ChangeLog()
	if err != nil {
		t.Fatal(err)
	}
	changes, _, err := st.ChangesAfter(local.Floor-1, 100)
	if err != nil || len(changes) != 6 {
		t.Fatalf("the log: %d changes, %v", len(changes), err)
	}
	p, err := New(st, Config{Name: "h", HostID: [16]byte{1}, URL: "nats://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	at := changes[1].Seq
	start := hubwire.ChainStart(local.IndexID, 9, at)
	p.setAnchor(anchor{index: local.IndexID, at: at, chain: start})
	want := start
	for i := 2; i < 6; i++ {
		e := entryOf(&changes[i])
		want = want.Next(&e)
	}
	if c, ok, err := p.chainAt(local, local.Seq); err != nil || !ok || c != want {
		t.Fatalf("chain at %d: %s %v %v, want %s", local.Seq, c, ok, err, want)
	}
	if c, ok, _ := p.chainAt(local, at); !ok || c != start {
		t.Fatalf("chain at the anchor: %s %v", c, ok)
	}
	for _, seq := range []uint64{at - 1, local.Seq + 1} {
		if _, ok, err := p.chainAt(local, seq); ok || err != nil {
			t.Errorf("chain at %d (anchor %d, log to %d): computed (%v)", seq, at, local.Seq, err)
		}
	}
	other := local
	other.IndexID[0] ^= 1
	if _, ok, _ := p.chainAt(other, local.Seq); ok {
		t.Error("the chain of another index was computed from this one's anchor")
	}
	if err := st.TrimChanges(context.Background(), at+1); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := p.chainAt(local, local.Seq); ok || err != nil {
		t.Fatalf("computed past trimmed entries (%v)", err)
	}
}

// The hub's mark and the anchor are kept in one meta value; a value
// written before chains keeps the mark and gives no anchor.
func TestHeldKeepsTheAnchor(t *testing.T) {
	st := openLogged(t, 0)
	ctx := context.Background()
	if err := st.PutMeta(ctx, heldMeta, []byte("ab 7")); err != nil {
		t.Fatal(err)
	}
	if h, a := loadHeld(st); h != (heldMark{0xab, 7}) || a != (anchor{}) {
		t.Fatalf("a mark from before chains: %+v %+v", h, a)
	}
	a := anchor{index: store.IndexID{3}, at: 41, chain: hubwire.ChainStart([16]byte{3}, 0xe2, 41), epochs: [4]uint64{0xe2, 0xe1}}
	if err := st.PutMeta(ctx, heldMeta, heldValue(heldMark{0xcd, 42}, a)); err != nil {
		t.Fatal(err)
	}
	if h, got := loadHeld(st); h != (heldMark{0xcd, 42}) || got != a {
		t.Fatalf("round trip: %+v %+v, want %+v", h, got, a)
	}
	if err := st.PutMeta(ctx, heldMeta, []byte("cd 42 03000000000000000000000000000000 41 nothex e2,e1")); err != nil {
		t.Fatal(err)
	}
	if h, got := loadHeld(st); h != (heldMark{0xcd, 42}) || got != (anchor{}) {
		t.Fatalf("a damaged anchor: %+v %+v", h, got)
	}
}

// What a hub state makes of the anchor: the index's own latest resend
// and chain resume and count as acknowledged; an older resend of its own
// (a hub, or one node of a cluster, behind) is asked again, then resent
// whole under the same id; another machine's resend or chain resets the
// index. On acks, an older resend of its own is left alone.
func TestResumeDecides(t *testing.T) {
	st := openLogged(t, 4)
	local, _ := st.ChangeLog()
	p, err := New(st, Config{Name: "h", HostID: [16]byte{1}, URL: "nats://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	l := &link{p: p}
	base := anchor{index: local.IndexID, at: local.Seq - 2, epochs: [4]uint64{0xe2, 0xe1}}
	base.chain = hubwire.ChainStart(local.IndexID, 0xe2, base.at)
	p.setAnchor(base)
	own, ok, _ := p.chainAt(local, local.Seq)
	if !ok {
		t.Fatal("no chain at the log's end")
	}
	state := func(epoch uint64, chain hubwire.Chain) hubwire.State {
		return hubwire.State{Name: "h", Complete: true, IndexID: local.IndexID.String(), Seq: local.Seq, Epoch: epoch, Chain: chain}
	}
	p.stat.IndexID = local.IndexID.String()

	// Its own.
	if c, whole, err := l.resumeChain(local, state(0xe2, own)); err != nil || whole || c != own || p.Status().Acked != local.Seq {
		t.Fatalf("its own chain: %s %v %v, acked %d", c, whole, err, p.Status().Acked)
	}
	// Behind: asked again, then resent whole, the index kept.
	p.setAnchor(base)
	for i := 1; i <= behindTries; i++ {
		_, whole, err := l.resumeChain(local, state(0xe1, hubwire.ChainStart(local.IndexID, 0xe1, local.Seq)))
		if want := i == behindTries; whole != want || (err == nil) != want {
			t.Fatalf("behind, sync %d: whole %v, %v", i, whole, err)
		}
	}
	if now, _ := st.ChangeLog(); now.IndexID != local.IndexID {
		t.Fatal("a hub behind reset the index")
	}
	if err := l.check(state(0xe1, hubwire.Chain{1})); err != nil {
		t.Fatalf("an ack of an older resend of its own: %v", err)
	}
	// Another machine's resend of this index: reset.
	if _, whole, err := l.resumeChain(local, state(0xe9, own)); err != nil || !whole {
		t.Fatalf("another machine's resend: whole %v, %v", whole, err)
	}
	now, _ := st.ChangeLog()
	if now.IndexID == local.IndexID {
		t.Fatal("another machine's resend did not reset the index")
	}
	if !p.replaced[local.IndexID.String()][0xe9] || !p.replaced[local.IndexID.String()][0xe1] {
		t.Fatalf("the index left is not remembered with its resends: %v", p.replaced)
	}
}

// A resend's epochs: its own first, then the hub's it replaces, then the
// anchor's, four at most.
func TestAnchorStarted(t *testing.T) {
	a := anchor{epochs: [4]uint64{3, 2, 1}}
	for _, c := range []struct {
		epoch, prior uint64
		want         [4]uint64
	}{
		{9, 0, [4]uint64{9, 3, 2, 1}},
		{9, 7, [4]uint64{9, 7, 3, 2}},
		{9, 2, [4]uint64{9, 3, 2, 1}}, // a prior of its own is kept where it is
	} {
		if got := a.started(c.epoch, c.prior); got != c.want {
			t.Errorf("started(%d, %d) = %v, want %v", c.epoch, c.prior, got, c.want)
		}
	}
	if got := (&anchor{}).started(5, 4); got != [4]uint64{5, 4} {
		t.Errorf("without an anchor: %v", got)
	}
}

// After a whole resend, the hub's older state of the index is its queue,
// not a hub behind: the publisher asks again without resending, until a
// state shows the resend applied; from then on an older state counts.
func TestAResendInTheHubsQueue(t *testing.T) {
	st := openLogged(t, 3)
	local, _ := st.ChangeLog()
	p, err := New(st, Config{Name: "h", HostID: [16]byte{1}, URL: "nats://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	l := &link{p: p}
	p.stat.IndexID = local.IndexID.String()
	p.setAnchor(anchor{index: local.IndexID, at: local.Seq, chain: hubwire.ChainStart(local.IndexID, 0xe1, local.Seq), epochs: [4]uint64{0xe1}})
	p.resent(context.Background(), local.IndexID, 0xe2, 0xe1, local.Seq)
	older := hubwire.State{Name: "h", Complete: true, IndexID: local.IndexID.String(), Seq: local.Seq, Epoch: 0xe1,
		Chain: hubwire.ChainStart(local.IndexID, 0xe1, local.Seq)}
	for i := range 2 * behindTries {
		if _, whole, err := l.resumeChain(local, older); whole || !errors.Is(err, errBehind) {
			t.Fatalf("sync %d with the resend in the hub's queue: whole %v, %v", i+1, whole, err)
		}
	}
	if err := l.check(older); err != nil {
		t.Fatalf("an ack of the older state: %v", err)
	}
	applied := older
	applied.Epoch, applied.Chain = 0xe2, hubwire.ChainStart(local.IndexID, 0xe2, local.Seq)
	if !p.heard(applied) {
		t.Fatal("its own state not heard")
	}
	if c, whole, err := l.resumeChain(local, applied); err != nil || whole || c != applied.Chain {
		t.Fatalf("the resend applied: %s %v %v", c, whole, err)
	}
	var whole bool
	for range behindTries {
		_, whole, _ = l.resumeChain(local, older)
	}
	if !whole {
		t.Fatal("an older state after the resend was seen applied never led to a resend")
	}
}

// An ack at a batch's end takes the chain follow computed for it, not
// before the anchor, and the ends up to it are forgotten.
func TestSentChain(t *testing.T) {
	l := &link{sent: map[uint64]hubwire.Chain{10: {1}, 20: {2}, 30: {3}}}
	a := anchor{at: 15}
	if _, ok := l.sentChain(10, a); ok {
		t.Error("a batch's end before the anchor was taken")
	}
	if c, ok := l.sentChain(20, a); !ok || c != (hubwire.Chain{2}) {
		t.Errorf("the end at 20: %v %v", c, ok)
	}
	if _, ok := l.sent[20]; ok || len(l.sent) != 1 {
		t.Errorf("ends left: %v", l.sent)
	}
	if _, ok := l.sentChain(25, a); ok {
		t.Error("no batch ends at 25")
	}
}
