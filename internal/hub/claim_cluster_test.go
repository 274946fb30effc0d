package hub_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/hub"
	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/internal/publish"
)

// The nodes of a cluster decide who holds a host's name alike: the
// stream decides it, by its own timestamps, whichever node was down or
// whose clock stepped.

// shortLeases gives every node a claim lease of testLease.
func shortLeases(nodes []*node) {
	for _, nd := range nodes {
		hub.SetClaimLease(&nd.cfg, testLease)
	}
}

// laptopOf is node nd's state of the laptop.
func laptopOf(nd *node) hubwire.State {
	for _, s := range nd.hub.Hosts() {
		if s.Name == "laptop" {
			return s
		}
	}
	return hubwire.State{}
}

// agreeOnLaptop waits until every node holds the same of the laptop,
// and fails saying what each holds when they do not within 30 s.
func agreeOnLaptop(t *testing.T, nodes ...*node) hubwire.State {
	t.Helper()
	same := func(a, b hubwire.State) bool {
		return a.Instance == b.Instance && a.Records == b.Records && a.Seq == b.Seq && a.IndexID == b.IndexID &&
			a.Chain == b.Chain && a.Complete == b.Complete
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		first, agree := laptopOf(nodes[0]), true
		for _, nd := range nodes[1:] {
			agree = agree && same(laptopOf(nd), first)
		}
		if agree {
			return first
		}
		if time.Now().After(deadline) {
			var lines []string
			for _, nd := range nodes {
				s := laptopOf(nd)
				lines = append(lines, fmt.Sprintf("%s: holder %x, %d records, seq %d, index %.8s, complete %v",
					nd.cfg.Self, s.Instance, s.Records, s.Seq, s.IndexID, s.Complete))
			}
			t.Fatalf("the nodes disagree on the laptop:\n%s", strings.Join(lines, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func instanceID(t *testing.T, h *host) uint64 {
	t.Helper()
	in, err := publish.LoadInstance(h.instance)
	if err != nil {
		t.Fatal(err)
	}
	return in.ID
}

// A copy of the host (its machine cloned, with a publisher instance of
// its own) asks while the host is heard in the stream: every node refuses
// it, the node that was down while the host spoke and the node whose
// clock runs a minute ahead included. Once the host is gone past the
// lease, the copy takes the name over, and the node that was down then
// replays the takeover from the stream as the others applied it. (Each
// node judged claims by the requests it heard and its own clock: such a
// node granted the copy the name that the others refused, and the nodes
// held two machines' trees under one name; a node down during a takeover
// dropped the copy's first batch for good, and answered whereis with part
// of its files for ever.)
func TestClusterNodesDecideClaimsAlike(t *testing.T) {
	nodes, c, _ := newNodes(t, 3, nil)
	shortLeases(nodes)
	nodes[2].cfg.Now = func() time.Time { return time.Now().Add(time.Minute) }
	startAll(t, nodes...)
	laptop := c.addHost("laptop")
	c.writeMany(t, laptop, "first", 20)
	laptop.caughtUp(t)
	for _, nd := range nodes {
		nd.converged(t, laptop)
	}
	clone := copyOf(t, c, laptop, "laptop-copy")
	c.writeMany(t, clone, "copy", 25)
	t.Cleanup(func() { clone.stopPublisher(t); clone.closeStore(t) })

	down := nodes[2]
	down.halt(t)
	time.Sleep(testLease) // the laptop's heartbeats reach nas1 and nas2 alone
	startAll(t, down)
	laptop.stopPublisher(t) // a restart: the copy asks in the pause
	c.startPublisher(clone)
	waitUntil(t, "the copy is refused", func() bool { return clone.pub.Status().RivalHolds })
	c.startPublisher(laptop)
	c.writeMany(t, laptop, "more", 10)
	laptop.caughtUp(t)
	for _, nd := range nodes {
		nd.converged(t, laptop)
	}
	time.Sleep(3 * time.Second) // the copy asks again, of every node
	st := agreeOnLaptop(t, nodes...)
	if want := instanceID(t, laptop); st.Instance != want || st.Records != 30 {
		t.Fatalf("the nodes hold %d records from publisher %x, want the laptop's 30 from %x", st.Records, st.Instance, want)
	}
	if s := clone.pub.Status(); !s.RivalHolds {
		t.Fatalf("the copy publishes: %+v", s)
	}
	for _, nd := range nodes {
		if n := nd.hub.Stats().Refused[hub.Refusal{Host: "laptop", Reason: hub.RefuseRival}]; n == 0 {
			t.Errorf("%s counted no refusal of the copy", nd.cfg.Self)
		}
	}

	// The laptop goes away; a node is down while the copy takes over.
	laptop.stopPublisher(t)
	laptop.closeStore(t)
	c.hosts["laptop"] = clone
	down.halt(t)
	time.Sleep(testLease)
	clone.stopPublisher(t) // a restart asks at once
	c.startPublisher(clone)
	clone.caughtUp(t)
	for _, nd := range nodes[:2] {
		nd.converged(t, clone)
	}
	startAll(t, down)
	down.converged(t, clone)
	st = agreeOnLaptop(t, nodes...)
	if want := instanceID(t, clone); st.Instance != want || st.Records != 25 {
		t.Fatalf("the nodes hold %d records from publisher %x, want the copy's 25 from %x", st.Records, st.Instance, want)
	}
	c.writeMany(t, clone, "more", 5)
	clone.caughtUp(t)
	for _, nd := range nodes {
		nd.converged(t, clone)
	}
	agreeOnLaptop(t, nodes...)
}
