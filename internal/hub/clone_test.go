package hub_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/hub"
	"github.com/annexd/annexd/internal/publish"
)

// A copy of a host (a cloned virtual machine, its state directory restored
// on a second machine) has the host's index, host id and credentials, and
// boots on its own. Its changes never mix with the host's at the hub:
// while the host is heard, the copy is refused and both say so; once the
// host has not been heard for the lease, the copy takes the name over and
// resends its index whole, since what the hub has came from the host; and
// the host, back, takes the name back the same way.
func TestACopyOfAHostNeverMixesItsIndexIn(t *testing.T) {
	c := newCluster(t)
	c.shortLease()
	laptop := c.addHost("laptop")
	c.addHost("desktop")
	laptop.write(t, map[string]string{"a": "laptop a", "b": "laptop b"})
	laptop.index(t, c)
	laptop.caughtUp(t)

	clone := copyOf(t, c, laptop, "laptop-copy")
	clone.write(t, map[string]string{"a": "laptop a", "b": "laptop b", "c": "only on the copy"})
	clone.index(t, c)
	c.startPublisher(clone)
	t.Cleanup(func() { clone.stopPublisher(t); clone.closeStore(t) })

	waitUntil(t, "the copy says another machine holds the name", func() bool {
		s := clone.pub.Status()
		return s.RivalHolds && strings.Contains(s.LastError, "another machine publishes under this host's name")
	})
	waitUntil(t, "the laptop hears of the copy", func() bool { return laptop.pub.Status().Rival != "" })
	laptop.write(t, map[string]string{"d": "laptop after the copy"})
	laptop.index(t, c)
	laptop.caughtUp(t)
	c.matchTrees(t, "desktop") // the laptop's files only: none of the copy's
	if n := c.hub.Stats().Refused[hub.Refusal{Host: "laptop", Reason: hub.RefuseRival}]; n == 0 {
		t.Errorf("the copy's requests were not counted as refused: %v", c.hub.Stats().Refused)
	}

	// The laptop goes away. Past the lease, the copy's next request takes
	// the name over: the hub has changes the copy never made.
	takeOver := func(from, to *host) {
		t.Helper()
		from.stopPublisher(t)
		time.Sleep(testLease)
		to.stopPublisher(t) // a restart asks at once
		c.startPublisher(to)
		if s := to.caughtUp(t); s.Resends == 0 {
			t.Errorf("the name taken over without a whole resend: %+v", s)
		}
		c.hosts["laptop"] = to
		c.matchTrees(t, "desktop")
	}
	takeOver(laptop, clone)

	// The laptop comes back while the copy runs, then the copy stops.
	c.startPublisher(laptop)
	waitUntil(t, "the laptop waits for the copy", func() bool { return laptop.pub.Status().RivalHolds })
	takeOver(clone, laptop)
}

// copyHost copies h's index, host id and publisher instance file to dir,
// as a copy of its machine has them. The copy's instance file is at
// another path, as on another machine it is in another boot: its
// publisher gets an instance of its own.
func copyHost(t *testing.T, h *host, dir string) *host {
	t.Helper()
	clone := &host{name: h.name, root: filepath.Join(dir, "tree"), dbPath: filepath.Join(dir, "index.db"), batch: h.batch,
		instance: filepath.Join(dir, "host-id-publisher"), id: h.id}
	if err := os.MkdirAll(clone.root, 0o755); err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{h.dbPath: clone.dbPath, h.instance: clone.instance} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a, err := publish.LoadInstance(h.instance)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := publish.LoadInstance(clone.instance); err != nil || b.ID == a.ID {
		t.Fatalf("the copy's publisher has the laptop's instance (%v)", err)
	}
	clone.openStore(t)
	return clone
}

// publishedLaptop starts a hub with hosts "laptop" and "desktop", and
// the laptop's files published.
func publishedLaptop(t *testing.T, files map[string]string) (*cluster, *host) {
	t.Helper()
	c := newCluster(t)
	laptop := c.addHost("laptop")
	c.addHost("desktop")
	laptop.write(t, files)
	laptop.index(t, c)
	laptop.caughtUp(t)
	return c, laptop
}

// twinOf copies h's state to dir as copyHost does, with h's own
// publisher instance (the same boot, host name and path: a container
// started again from the same state), and starts h again.
func twinOf(t *testing.T, c *cluster, h *host, dir string) *host {
	t.Helper()
	twin := copyOf(t, c, h, dir)
	twin.instance = h.instance
	return twin
}

// copyOf is a copy of the running host h's machine under c.dir/dir, with
// a publisher instance of its own (copyHost); h runs on.
func copyOf(t *testing.T, c *cluster, h *host, dir string) *host {
	t.Helper()
	h.stopPublisher(t)
	h.closeStore(t)
	cp := copyHost(t, h, filepath.Join(c.dir, dir))
	h.openStore(t)
	c.startPublisher(h)
	return cp
}

// waitUntil polls cond until it holds, failing after waitFor.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitFor)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A copy that even has the host's publisher instance (a second copy of
// the state directory at the same path, on the same boot and host name:
// two containers alike) is one publisher to the hub. The host then hears
// the hub hold more of its index than it has, and resends its index
// whole instead of waiting behind the copy's changes; once the copy
// stops, the hub holds the host's tree alone.
func TestACopyWithTheHostsInstanceIsOutgrown(t *testing.T) {
	c, laptop := publishedLaptop(t, map[string]string{"a": "laptop a"})
	clone := twinOf(t, c, laptop, "laptop-copy")
	clone.write(t, map[string]string{"b": "copy b", "c": "copy c", "d": "copy d"})
	clone.index(t, c)
	c.startPublisher(clone)
	waitUntil(t, "the laptop hears the hub hold more than its index", func() bool { return laptop.pub.Status().Resends > 0 })
	clone.stopPublisher(t)
	clone.closeStore(t)
	laptop.write(t, map[string]string{"e": "laptop e"})
	laptop.index(t, c)
	laptop.caughtUp(t)
	c.matchTrees(t, "desktop")
}

// The hub's own downtime is not a holder's silence: a copy that asks
// first when the hub comes back after longer than the lease is refused,
// and the host keeps its name. (The lease ran on through the downtime:
// the copy took the name, and the hub answered the copy's tree for the
// laptop.)
func TestAHubBackAfterTheLeaseKeepsTheHolder(t *testing.T) {
	c := newCluster(t)
	c.shortLease()
	laptop := c.addHost("laptop")
	c.addHost("desktop")
	laptop.write(t, map[string]string{"a": "laptop a"})
	laptop.index(t, c)
	laptop.caughtUp(t)
	clone := copyOf(t, c, laptop, "laptop-copy")
	clone.write(t, map[string]string{"x": "only on the copy"})
	clone.index(t, c)
	c.startPublisher(clone)
	t.Cleanup(func() { clone.stopPublisher(t); clone.closeStore(t) })
	waitUntil(t, "the copy is refused", func() bool { return clone.pub.Status().RivalHolds })

	laptop.stopPublisher(t)
	clone.stopPublisher(t)
	c.stopHub()
	time.Sleep(testLease + time.Second)
	c.startHub()
	c.startPublisher(clone) // asks first
	waitUntil(t, "the copy is refused again", func() bool { return clone.pub.Status().RivalHolds })
	c.startPublisher(laptop)
	laptop.caughtUp(t)
	c.matchTrees(t, "desktop")
	if s := clone.pub.Status(); !s.RivalHolds {
		t.Fatalf("the copy publishes: %+v", s)
	}
}
