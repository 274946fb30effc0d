package audit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeIdle is an Indexer whose idleness the test sets.
type fakeIdle struct{ busy atomic.Bool }

func (f *fakeIdle) Idle() bool                      { return !f.busy.Load() }
func (f *fakeIdle) Busy(string) bool                { return false }
func (f *fakeIdle) Changed(context.Context, string) {}

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, v := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The gates read the load average and the power supplies from files laid
// out like /proc and /sys, and the indexer's idleness.
func TestGates(t *testing.T) {
	proc, sys := t.TempDir(), t.TempDir()
	writeTree(t, proc, map[string]string{"loadavg": "3.50 2.00 1.00 2/300 12345\n"})
	writeTree(t, sys, map[string]string{
		"class/power_supply/AC/type": "Mains\n", "class/power_supply/AC/online": "1\n",
		"class/power_supply/BAT0/type": "Battery\n", "class/power_supply/BAT0/status": "Discharging\n",
	})
	ix := &fakeIdle{}
	g := &gates{ix: ix, maxLoad: 1.0, battery: true, procDir: proc, sysDir: sys, ncpu: 2}
	if why := g.closed(0); !strings.Contains(why, "load average 1.75 per CPU") {
		t.Fatalf("load 3.5 on 2 CPUs: %q", why)
	}
	if why := g.closed(2); why != "" {
		t.Fatalf("load 3.5 less 2 own readers on 2 CPUs: %q", why)
	}
	g.maxLoad = -1
	if why := g.closed(0); why != "" {
		t.Fatalf("no load gate, on AC: %q", why)
	}
	writeTree(t, sys, map[string]string{"class/power_supply/AC/online": "0\n"})
	if why := g.closed(0); why != "on battery, discharging" {
		t.Fatalf("on battery: %q", why)
	}
	g.battery = false
	if why := g.closed(0); why != "" {
		t.Fatalf("battery ignored: %q", why)
	}
	ix.busy.Store(true)
	if why := g.closed(0); why != "the indexer has work" {
		t.Fatalf("indexer busy: %q", why)
	}
	// No such files: nothing to say.
	g = &gates{maxLoad: 1, battery: true, procDir: t.TempDir(), sysDir: t.TempDir(), ncpu: 1}
	if why := g.closed(0); why != "" {
		t.Fatalf("nothing to read: %q", why)
	}
	if l, err := loadAvg("/proc"); err != nil || l < 0 {
		t.Fatalf("this machine's load: %v, %v", l, err)
	}
}
