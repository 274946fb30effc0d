package publish

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/store"
)

func TestHostIDKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "host-id")
	a, err := LoadHostID(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadHostID(path)
	if err != nil || a != b {
		t.Fatalf("second load: %x %v, want %x", b, err, a)
	}
	if a[6]>>4 != 4 || a[8]>>6 != 2 {
		t.Fatalf("%s is not a version 4 UUID", hubwire.UUIDString(a))
	}
	if err := os.WriteFile(path, []byte("not a uuid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHostID(path); err == nil {
		t.Fatal("a damaged host id file was accepted")
	}
}

func TestDefaultName(t *testing.T) {
	name, err := DefaultName()
	if err != nil {
		t.Fatal(err)
	}
	if err := hubwire.CheckName(name); err != nil {
		t.Fatal(err)
	}
}

func TestResumePoint(t *testing.T) {
	local := store.LogState{IndexID: store.IndexID{1}, Seq: 100, Floor: 51}
	id := local.IndexID.String()
	for _, c := range []struct {
		name  string
		hub   hubwire.State
		from  uint64
		whole bool
	}{
		{"caught up", hubwire.State{IndexID: id, Complete: true, Seq: 100}, 100, false},
		{"behind, kept", hubwire.State{IndexID: id, Complete: true, Seq: 50}, 50, false},
		{"behind, trimmed", hubwire.State{IndexID: id, Complete: true, Seq: 49}, 0, true},
		{"ahead (a restored index)", hubwire.State{IndexID: id, Complete: true, Seq: 101}, 0, true},
		{"another index", hubwire.State{IndexID: "00", Complete: true, Seq: 100}, 0, true},
		{"resend incomplete", hubwire.State{IndexID: id, Seq: 100}, 0, true},
		{"new to the hub", hubwire.State{}, 0, true},
	} {
		from, whole := resumePoint(local, c.hub)
		if from != c.from || whole != c.whole {
			t.Errorf("%s: %d %v, want %d %v", c.name, from, whole, c.from, c.whole)
		}
	}
}

func TestFitBatch(t *testing.T) {
	long := make([]byte, 4000)
	var cs []store.Logged
	for i := range 1000 {
		cs = append(cs, store.Logged{Seq: uint64(i + 1), Path: long})
	}
	got := fitBatch(cs)
	if n := len(got); n == 0 || n == len(cs) || n*4000 > maxBatchBytes {
		t.Fatalf("1000 changes of 4000-byte paths: a batch of %d", n)
	}
	if got := fitBatch(cs[:3]); len(got) != 3 {
		t.Fatalf("3 changes: %d", len(got))
	}
}

// TestRunEndsOnAnIndexWithoutALog: a daemon that opened its index
// without Options.Changes misconfigured the publisher; Run says so at
// once instead of retrying forever.
func TestRunEndsOnAnIndexWithoutALog(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "index.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, err := New(st, Config{Name: "h", HostID: [16]byte{1}, URL: "nats://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); !errors.Is(err, store.ErrNoChanges) {
		t.Fatalf("Run: %v, want ErrNoChanges", err)
	}
}

// TestStateOfAnotherHostIsIgnored: a state that names another host, with
// this index's id and far more changes than it holds, acknowledges
// nothing: a host's credentials can aim the hub's answers at another's
// acks, and the log is trimmed only on what the hub applied of this one.
func TestStateOfAnotherHostIsIgnored(t *testing.T) {
	p, err := New(nil, Config{Name: "bravo", HostID: [16]byte{1}, URL: "nats://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	p.stat.IndexID, p.stat.Acked = "ab", 64
	acked := func() uint64 {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.stat.Acked
	}
	last := func() hubwire.State {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.ack
	}
	if p.heard(hubwire.State{Name: "mallory", IndexID: "ab", Complete: true, Seq: 1062}) {
		t.Error("took another host's state")
	}
	if p.heard(hubwire.State{IndexID: "ab", Complete: true, Seq: 1062}) {
		t.Error("took a state that names no host")
	}
	if n := acked(); n != 64 || last().Seq != 0 {
		t.Fatalf("acknowledged %d (last word %+v) after states of other hosts, want 64", acked(), last())
	}
	// Its own state is its last word, and counts once its chain is
	// checked (chain.go).
	own := hubwire.State{Name: "bravo", IndexID: "ab", Complete: true, Seq: 70}
	if !p.heard(own) || last().Seq != 70 || acked() != 64 {
		t.Fatalf("its own state: last word %+v, acknowledged %d before its chain was checked", last(), acked())
	}
	if p.acked(own); acked() != 70 {
		t.Fatalf("its own state checked: acknowledged %d, want 70", acked())
	}
}

// A heartbeat right after a batch was sent may find a busy hub that has
// not applied it yet: no stall, as the hub had every change at the
// heartbeat before. At the next heartbeat with no progress, a stall.
func TestAHeartbeatRightAfterABatchIsNoStall(t *testing.T) {
	l := &link{p: &Publisher{}}
	local := store.LogState{IndexID: store.IndexID{1}, Seq: 4}
	st := hubwire.State{Complete: true, IndexID: local.IndexID.String(), Seq: 3, Records: 3}
	for i, beat := range []struct {
		seq, cursor uint64
		want        bool
	}{
		{3, 3, false}, // caught up
		{3, 4, false}, // a batch sent since: not applied yet
		{3, 4, true},  // no progress in a heartbeat
		{4, 4, false}, // applied
		{4, 5, false},
		{5, 6, false}, // behind, but moving
		{5, 6, true},
	} {
		st.Seq = beat.seq
		if got := l.stalled(st, local, beat.cursor); got != beat.want {
			t.Errorf("heartbeat %d (hub at %d, sent %d): stalled %v, want %v", i, beat.seq, beat.cursor, got, beat.want)
		}
	}
}
