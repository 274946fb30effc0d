package hub_test

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/hub"
	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/store"
)

// TestHubKilledLosesNothingAcknowledged kills the hub's process (SIGKILL)
// while a host publishes its log, and starts it again on the same files:
// every change the host saw acknowledged is in the view, and the rest
// arrives without a whole resend.
func TestHubKilledLosesNothingAcknowledged(t *testing.T) {
	dir := t.TempDir()
	c := startChildAt(t, "hub", []string{"laptop"}, dir, "")
	h := newBenchHost(t, "laptop")
	h.batch = 20
	first := synthetic(1, 100, 0)
	h.submit(t, first)
	h.startPublisher(t, c.url)
	h.caughtUp(t)
	h.stopPublisher()
	const second = 2000 // the kill lands after 200: most are still unsent
	h.submit(t, synthetic(2, second, 700))
	seed := h.pub.Status().Acked
	h.startPublisher(t, c.url)
	deadline := time.Now().Add(waitFor)
	for h.pub.Status().Acked < seed+200 {
		if time.Now().After(deadline) {
			t.Fatalf("no progress: %+v", h.pub.Status())
		}
		time.Sleep(time.Millisecond)
	}
	c.kill(t)
	acked := h.pub.Status().Acked
	if acked >= seed+second {
		t.Fatalf("the hub took all %d changes before the kill (acked %d): the kill tests nothing", second, acked)
	}
	startChildAt(t, "hub", []string{"laptop"}, dir, strings.TrimPrefix(c.url, "nats://"))
	if st := hubState(t, h); !st.Complete || st.Seq < acked {
		t.Fatalf("after the kill the hub has %+v; the host saw %d acknowledged", st, acked)
	}
	h.caughtUp(t)
	if s := h.pub.Status(); s.Resends != 0 {
		t.Fatalf("the host resent its index whole %d times after the kill", s.Resends)
	}
	matchStore(t, h, first)
}

// hubState asks the hub for h's state, waiting for h's connection to
// come back after a restart.
func hubState(t *testing.T, h *benchHost) hubwire.State {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		if nc := h.pub.Conn(); nc != nil && nc.IsConnected() {
			hosts, err := hub.NewClient(nc, h.name).Hosts(context.Background())
			if err == nil {
				for _, st := range hosts {
					if st.Name == h.name {
						return st
					}
				}
				t.Fatalf("the hub does not know %s: %+v", h.name, hosts)
			}
			if !errors.Is(err, hub.ErrUnreachable) {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reconnect", h.name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// matchStore compares whereis for every digest of h's index with the
// index's own paths; the digests of old, replaced records must be held
// nowhere.
func matchStore(t *testing.T, h *benchHost, old []store.Change) {
	t.Helper()
	want := map[string][]string{}
	if err := h.st.Subtree(context.Background(), []byte("/"), func(path []byte, r store.Record) error {
		d := hex.EncodeToString(r.Digest)
		want[d] = append(want[d], string(path))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cl := hub.NewClient(h.pub.Conn(), h.name)
	for _, c := range old {
		d := hex.EncodeToString(c.Record.Digest)
		if _, ok := want[d]; ok {
			continue
		}
		if got, err := cl.Whereis(context.Background(), "SHA256", d, -1); err != nil || len(got.Holders) != 0 {
			t.Fatalf("whereis of replaced content %s: %+v %v, want nobody", d, got.Holders, err)
		}
	}
	for d, paths := range want {
		sort.Strings(paths)
		got, err := cl.Whereis(context.Background(), "SHA256", d, -1)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Holders) != 1 || got.Holders[0].Host != h.name {
			t.Fatalf("whereis %s: %+v, want only %s", d, got.Holders, h.name)
		}
		var g []string
		for _, p := range got.Holders[0].Paths {
			g = append(g, string(p))
		}
		sort.Strings(g)
		if !slices.Equal(g, paths) {
			t.Fatalf("whereis %s: %q, the index has %q", d, g, paths)
		}
	}
}
