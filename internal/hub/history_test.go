package hub_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/publish"
)

// A copy of a host with the host's own publisher instance (two
// containers alike: the same boot, host name and state path) numbers
// its own changes as the host numbers others. When the copy starts
// after the host published as many changes as it made, the hub's
// sequence number equals the copy's: only the chain tells the two
// histories apart, and the copy resends its index whole.
func TestAnotherHistoryUnderTheSameNumbersIsResentWhole(t *testing.T) {
	c, laptop := publishedLaptop(t, map[string]string{"a": "laptop a", "b": "laptop b"})
	clone := twinOf(t, c, laptop, "laptop-copy")

	laptop.write(t, map[string]string{"c1": "laptop c1", "c2": "laptop c2", "c3": "laptop c3", "c4": "laptop c4",
		"c5": "laptop c5", "c6": "laptop c6", "c7": "laptop c7"})
	laptop.index(t, c)
	laptop.caughtUp(t)
	laptop.stopPublisher(t)

	// Seven changes, as the laptop's: its tree lives elsewhere, so the
	// laptop's two records go and five come.
	clone.write(t, map[string]string{"a": "laptop a", "b": "laptop b", "x1": "copy x1", "x2": "copy x2", "x3": "copy x3"})
	clone.index(t, c)
	lap, _ := laptop.st.ChangeLog()
	cop, _ := clone.st.ChangeLog()
	if lap.IndexID != cop.IndexID || lap.Seq != cop.Seq {
		t.Fatalf("the copy's log is not numbered as the laptop's: %+v, %+v", cop, lap)
	}
	c.startPublisher(clone)
	t.Cleanup(func() { clone.stopPublisher(t); clone.closeStore(t) })
	if s := clone.caughtUp(t); s.Resends == 0 || s.Rival == "" {
		t.Errorf("the copy resumed on the laptop's changes: %+v", s)
	}
	c.hosts["laptop"] = clone
	c.matchTrees(t, "desktop")
}

// An index restored from a backup while the hub is away makes new
// changes under numbers the hub already has from the lost ones. Its
// changes past the hub's are not sent on top of the lost ones: the
// chains differ, and the index is resent whole. A backup made before
// chains has none, and the hub's mark it kept (older than the hub's
// last change) decides the same.
func TestARestoredIndexIsResentWhole(t *testing.T) {
	t.Run("with a chain", func(t *testing.T) { restoredIndex(t, false) })
	t.Run("from before chains", func(t *testing.T) { restoredIndex(t, true) })
}

func restoredIndex(t *testing.T, preChain bool) {
	c, laptop := publishedLaptop(t, map[string]string{"a": "laptop a", "b": "laptop b"})
	s := laptop.pub.Status()
	laptop.stopPublisher(t)
	if preChain {
		inst, err := publish.LoadInstance(laptop.instance)
		if err != nil {
			t.Fatal(err)
		}
		// The meta value as the previous version wrote it (held.go).
		if err := laptop.st.PutMeta(context.Background(), "publish.held", fmt.Appendf(nil, "%x %d", inst.ID, s.Acked)); err != nil {
			t.Fatal(err)
		}
	}
	laptop.closeStore(t)
	backup, err := os.ReadFile(laptop.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	laptop.openStore(t)
	c.startPublisher(laptop)
	laptop.write(t, map[string]string{"lost1": "lost 1", "lost2": "lost 2", "lost3": "lost 3"})
	laptop.index(t, c)
	laptop.caughtUp(t)
	laptop.stopPublisher(t)
	laptop.closeStore(t)

	// The disk is lost and restored, files and index, from the backup;
	// the host then makes more changes than it lost before it publishes.
	for _, f := range []string{"lost1", "lost2", "lost3"} {
		if err := os.Remove(filepath.Join(laptop.root, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(laptop.dbPath, backup, 0o600); err != nil {
		t.Fatal(err)
	}
	laptop.openStore(t)
	laptop.write(t, map[string]string{"n1": "new 1", "n2": "new 2", "n3": "new 3", "n4": "new 4"})
	laptop.index(t, c)
	c.startPublisher(laptop)
	if s := laptop.caughtUp(t); s.Resends != 1 {
		t.Errorf("the restored index was resent whole %d times, want once: %+v", s.Resends, s)
	}
	c.matchTrees(t, "desktop")
}

// An index from before chains (its meta holds the hub's mark alone)
// takes the hub's chain and resumes without a resend.
func TestAnIndexFromBeforeChainsResumes(t *testing.T) {
	c, laptop := publishedLaptop(t, map[string]string{"a": "laptop a", "b": "laptop b"})
	s := laptop.pub.Status()
	laptop.stopPublisher(t)
	inst, err := publish.LoadInstance(laptop.instance)
	if err != nil {
		t.Fatal(err)
	}
	// The meta value as the previous version wrote it (publish's held.go).
	if err := laptop.st.PutMeta(context.Background(), "publish.held", fmt.Appendf(nil, "%x %d", inst.ID, s.Acked)); err != nil {
		t.Fatal(err)
	}
	c.startPublisher(laptop)
	laptop.write(t, map[string]string{"c": "laptop c"})
	laptop.index(t, c)
	if s := laptop.caughtUp(t); s.Resends != 0 {
		t.Errorf("an index from before chains was resent whole: %+v", s)
	}
	c.matchTrees(t, "desktop")
}

// Two copies of one state directory that both run with one publisher
// instance (two containers alike) replace each other's index at the hub,
// never mix it. When an index one of them replaced comes back under a
// later resend, that one takes a new instance, and the hub then refuses
// it while the other is heard: the resends stop, and the hub holds the
// other's tree.
func TestTwinsBecomeRivals(t *testing.T) {
	c, laptop := publishedLaptop(t, map[string]string{"a": "laptop a", "b": "laptop b"})
	twin := twinOf(t, c, laptop, "laptop-twin")
	twin.write(t, map[string]string{"a": "laptop a", "b": "laptop b", "x": "twin x"})
	twin.index(t, c)
	c.startPublisher(twin)
	t.Cleanup(func() { twin.stopPublisher(t); twin.closeStore(t) })

	// Both go on changing files, faster than the heartbeat: the one
	// whose index the other's resend replaced hears no stall, and still
	// finds out.
	var holder, waiting *host
	n := 0
	waitUntil(t, "one twin waits for the other", func() bool {
		switch {
		case twin.pub.Status().RivalHolds:
			holder, waiting = laptop, twin
		case laptop.pub.Status().RivalHolds:
			holder, waiting = twin, laptop
		}
		if n++; n%30 == 0 && holder == nil {
			for _, h := range []*host{laptop, twin} {
				h.write(t, map[string]string{fmt.Sprintf("tick%d", n%4): fmt.Sprintf("%s tick %d", h.root, n)})
				h.index(t, c)
			}
		}
		return holder != nil
	})
	holder.write(t, map[string]string{"later": "written by the holder"})
	holder.index(t, c)
	s := holder.caughtUp(t)
	resends := s.Resends + waiting.pub.Status().Resends
	if resends > 4 {
		t.Errorf("%d whole resends before one twin waited", resends)
	}
	time.Sleep(8 * time.Second) // four heartbeats
	if n := holder.pub.Status().Resends + waiting.pub.Status().Resends; n != resends {
		t.Errorf("the twins went on resending: %d, then %d", resends, n)
	}
	if !waiting.pub.Status().RivalHolds {
		t.Errorf("the waiting twin publishes again: %+v", waiting.pub.Status())
	}
	c.hosts["laptop"] = holder
	c.matchTrees(t, "desktop")
}

// A copy with an instance of its own whose index keeps no chain (made by
// an older version: a cloned machine's template) takes the name over once
// the host is silent: it resends whole, since the hub's history is the
// host's, not its own.
func TestACopyFromBeforeChainsIsResentWhole(t *testing.T) {
	c := newCluster(t)
	c.shortLease()
	laptop := c.addHost("laptop")
	c.addHost("desktop")
	laptop.write(t, map[string]string{"a": "laptop a"})
	laptop.index(t, c)
	s := laptop.caughtUp(t)
	laptop.stopPublisher(t)
	laptop.closeStore(t)
	clone := copyHost(t, laptop, filepath.Join(c.dir, "laptop-copy"))
	inst, err := publish.LoadInstance(laptop.instance)
	if err != nil {
		t.Fatal(err)
	}
	if err := clone.st.PutMeta(context.Background(), "publish.held", fmt.Appendf(nil, "%x %d", inst.ID, s.Acked)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clone.stopPublisher(t); clone.closeStore(t) })
	laptop.openStore(t)
	c.startPublisher(laptop)
	laptop.write(t, map[string]string{"b": "laptop b"})
	laptop.index(t, c)
	laptop.caughtUp(t)
	laptop.stopPublisher(t)

	clone.write(t, map[string]string{"a": "laptop a", "x": "copy x"})
	clone.index(t, c)
	time.Sleep(testLease)
	c.startPublisher(clone)
	if s := clone.caughtUp(t); s.Resends == 0 {
		t.Errorf("the copy resumed on the laptop's history: %+v", s)
	}
	c.hosts["laptop"] = clone
	c.matchTrees(t, "desktop")
}
