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

// The load gate reads the load average from a file laid out like /proc
// and leaves the caller's own threads out.
func TestLoadGate(t *testing.T) {
	for load, want := range map[string]bool{"3.50 1.0 1.0 1/100 42\n": true, "2.90 3 3 1/1 1": false,
		"0.10 0 0 1/1 1": false, "": false, "x": false} {
		proc := t.TempDir()
		writeTree(t, proc, map[string]string{"loadavg": load})
		why, busy := LoadGate{Max: 1, Own: 1, CPUs: 2, ProcDir: proc}.Busy()
		if busy != want || busy != strings.Contains(why, "per CPU is above 1.00") {
			t.Errorf("load %q: %q, %v; want busy %v", load, why, busy, want)
		}
	}
	proc := t.TempDir()
	writeTree(t, proc, map[string]string{"loadavg": "3.50 2.00 1.00 2/300 12345\n"})
	if why, _ := (LoadGate{Max: 1, CPUs: 2, ProcDir: proc}).Busy(); !strings.Contains(why, "load average 1.75 per CPU") {
		t.Errorf("load 3.5 on 2 CPUs: %q", why)
	}
	if _, busy := (LoadGate{Max: 1, Own: 2, CPUs: 2, ProcDir: proc}).Busy(); busy {
		t.Error("load 3.5 less 2 own readers on 2 CPUs is busy")
	}
	if _, busy := (LoadGate{Max: 1, CPUs: 1, ProcDir: t.TempDir()}).Busy(); busy {
		t.Error("busy without a loadavg file")
	}
	if l, err := loadAvg("/proc"); err != nil || l < 0 {
		t.Fatalf("this machine's load: %v, %v", l, err)
	}
}

// The battery gate is busy on a discharging battery with no supply online.
func TestBatteryGate(t *testing.T) {
	ps := "class/power_supply/"
	cases := []struct {
		files map[string]string
		want  bool
	}{
		{map[string]string{ps + "BAT0/type": "Battery\n", ps + "BAT0/status": "Discharging\n"}, true},
		{map[string]string{ps + "BAT0/type": "Battery", ps + "BAT0/status": "Discharging", ps + "AC/type": "Mains", ps + "AC/online": "1"}, false},
		{map[string]string{ps + "BAT0/type": "Battery", ps + "BAT0/status": "Discharging", ps + "AC/type": "Mains", ps + "AC/online": "0"}, true},
		{map[string]string{ps + "BAT0/type": "Battery", ps + "BAT0/status": "Charging"}, false},
		{map[string]string{}, false},
	}
	for i, c := range cases {
		sys := t.TempDir()
		writeTree(t, sys, c.files)
		why, busy := BatteryGate{SysDir: sys}.Busy()
		if busy != c.want || busy != (why == "on battery, discharging") {
			t.Errorf("case %d: %q, %v; want %v", i, why, busy, c.want)
		}
	}
}

func TestIndexerGate(t *testing.T) {
	ix := &fakeIdle{}
	if _, busy := (IndexerGate{Indexer: ix}).Busy(); busy {
		t.Error("busy while the indexer is idle")
	}
	ix.busy.Store(true)
	if why, busy := (IndexerGate{Indexer: ix}).Busy(); !busy || why != "the indexer has work" {
		t.Errorf("indexer busy: %q, %v", why, busy)
	}
	if _, busy := (IndexerGate{}).Busy(); busy {
		t.Error("busy without an indexer")
	}
}

// The audit's gates follow its config: the indexer first, the load gate
// only with a positive max_load, the battery unless ignored.
func TestGates(t *testing.T) {
	proc, sys := t.TempDir(), t.TempDir()
	writeTree(t, proc, map[string]string{"loadavg": "1000.0 2.00 1.00 2/300 12345\n"})
	writeTree(t, sys, map[string]string{
		"class/power_supply/BAT0/type": "Battery\n", "class/power_supply/BAT0/status": "Discharging\n",
	})
	ix := &fakeIdle{}
	c := Config{MaxLoad: 1}
	g := newGates(ix, &c, proc, sys)
	if why := g.closed(0); !strings.Contains(why, "load average") {
		t.Fatalf("a load of 1000: %q", why)
	}
	g.c.MaxLoad = -1
	if why := g.closed(0); why != "on battery, discharging" {
		t.Fatalf("no load gate, on battery: %q", why)
	}
	g.c.IgnoreBattery = true
	if why := g.closed(0); why != "" {
		t.Fatalf("battery ignored: %q", why)
	}
	ix.busy.Store(true)
	if why := g.closed(0); why != "the indexer has work" {
		t.Fatalf("indexer busy: %q", why)
	}
	if n := len(Gates(nil, &Config{MaxLoad: -1, IgnoreBattery: true}, 0, "", "")); n != 0 {
		t.Fatalf("%d gates with everything off", n)
	}
	g = newGates(nil, &Config{MaxLoad: 1}, t.TempDir(), t.TempDir())
	if why := g.closed(0); why != "" {
		t.Fatalf("nothing to read: %q", why)
	}
}
