package audit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeIdle is an Indexer whose bulk work the test sets.
type fakeIdle struct{ busy atomic.Bool }

func (f *fakeIdle) Bulk() bool                      { return f.busy.Load() }
func (f *fakeIdle) Busy(string) bool                { return false }
func (f *fakeIdle) Settling() bool                  { return false }
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
		if busy != want || busy != strings.Contains(why, "per CPU is above max_load = 1.00") {
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
	if why, busy := (IndexerGate{Indexer: ix}).Busy(); !busy || why != "the indexer is busy with a scan or many changes" {
		t.Errorf("indexer busy: %q, %v", why, busy)
	}
	if _, busy := (IndexerGate{}).Busy(); busy {
		t.Error("busy without an indexer")
	}
}

// The audit's gates follow its config: the indexer first, the load gate
// only with a positive max_load where the kernel has no pressure
// information, the battery unless ignored.
func TestGates(t *testing.T) {
	proc, sys := t.TempDir(), t.TempDir()
	writeTree(t, proc, map[string]string{"loadavg": "1000.0 2.00 1.00 2/300 12345\n"})
	writeTree(t, sys, map[string]string{
		"class/power_supply/BAT0/type": "Battery\n", "class/power_supply/BAT0/status": "Discharging\n",
	})
	ix := &fakeIdle{}
	c := Config{MaxLoad: 1}
	g := newGates(ix, &c, proc, sys, nil)
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
	if why := g.closed(0); why != "the indexer is busy with a scan or many changes" {
		t.Fatalf("indexer busy: %q", why)
	}
	if n := len(Gates(nil, &Config{MaxLoad: -1, MaxPressure: -1, IgnoreBattery: true}, 0, nil, "", "")); n != 0 {
		t.Fatalf("%d gates with everything off", n)
	}
	g = newGates(nil, &Config{MaxLoad: 1}, t.TempDir(), t.TempDir(), nil)
	if why := g.closed(0); why != "" {
		t.Fatalf("nothing to read: %q", why)
	}
}

// psi lays out /proc/pressure/cpu and io with the "some" lines given,
// beside a load average of 1000.
func psi(t *testing.T, proc string, cpu10, io10 float64, cpuTotal, ioTotal time.Duration) {
	t.Helper()
	line := func(avg10 float64, total time.Duration) string {
		return fmt.Sprintf("some avg10=%.2f avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
			avg10, total.Microseconds())
	}
	writeTree(t, proc, map[string]string{"pressure/cpu": line(cpu10, cpuTotal), "pressure/io": line(io10, ioTotal),
		"loadavg": "1000.0 2.00 1.00 2/300 12345\n"})
}

// Where the kernel has pressure information, the machine is busy when
// tasks wait for a CPU or for I/O more than max_pressure percent of the
// time, whatever the load average says.
func TestPressureGateBeforeLoad(t *testing.T) {
	proc := t.TempDir()
	psi(t, proc, 5, 3, time.Second, time.Second)
	c := Config{MaxLoad: 1}
	c.Fill()
	g := newGates(nil, &c, proc, t.TempDir(), nil)
	if why := g.closed(0); why != "" {
		t.Fatalf("a load of 1000 with 5%% CPU and 3%% I/O pressure: %q; want open", why)
	}
	psi(t, proc, 63, 3, time.Second, time.Second)
	g = newGates(nil, &c, proc, t.TempDir(), nil)
	if why := g.closed(0); !strings.Contains(why, "a CPU 63% of the last 10s, above max_pressure = 40%") {
		t.Fatalf("63%% CPU pressure: %q", why)
	}
	psi(t, proc, 0, 55, time.Second, time.Second)
	g = newGates(nil, &c, proc, t.TempDir(), nil)
	if why := g.closed(0); !strings.Contains(why, "I/O 55%") {
		t.Fatalf("55%% I/O pressure: %q", why)
	}
	off := Config{MaxLoad: -1}
	off.Fill()
	if off.MaxPressure >= 0 {
		t.Fatalf("max_load = -1 without max_pressure: max_pressure %v, want never", off.MaxPressure)
	}
	if why := newGates(nil, &off, proc, t.TempDir(), nil).closed(0); why != "" {
		t.Fatalf("max_load = -1 (never): %q", why)
	}
	if !HasPressure("/proc") {
		t.Log("this kernel has no pressure information; the load average stands in")
	}
}

// Between looks the gate takes the kernel's totals, and leaves the
// caller's own time in reads out of the I/O share: an audit alone on
// the machine, reading 60 % of the time, does not pause itself; others
// waiting half the time beside it close the gate.
func TestPressureGateLeavesOwnReadsOut(t *testing.T) {
	proc := t.TempDir()
	var own time.Duration
	g := &PressureGate{Max: 40, ProcDir: proc, OwnIO: func() time.Duration { return own }}
	base := psiLook{at: time.Now(), cpu: time.Hour, io: time.Hour, own: 0}
	g.looks = []psiLook{base}
	l := base
	l.at = base.at.Add(5 * time.Second)
	l.io += 3 * time.Second // 60 % of 5 s: the audit's own reads
	l.own = 3 * time.Second
	l.cpu += time.Second // 20 %
	cpu, io, span := g.shares(l)
	if span != 5*time.Second || cpu < 19.9 || cpu > 20.1 || io > 0.1 {
		t.Fatalf("the audit alone: cpu %.1f%%, io %.1f%% over %v; want 20%%, 0%% over 5s", cpu, io, span)
	}
	// Others wait half the time, by chance beside the audit's reads:
	// some = 1 - (1-0.6)(1-0.5) = 80 %.
	g.looks = []psiLook{base}
	l2 := base
	l2.at = base.at.Add(5 * time.Second)
	l2.io += 4 * time.Second
	l2.own += 3 * time.Second
	_, io, _ = g.shares(l2)
	if io < 45 || io > 55 {
		t.Fatalf("others waiting half the time beside the audit: io %.1f%%, want about 50%%", io)
	}
	// A look long after the last stands on the kernel's ten-second average.
	l3 := l2
	l3.at = l2.at.Add(time.Hour)
	l3.cpu10, l3.io10 = 7, 9
	if cpu, io, span := g.shares(l3); cpu != 7 || io != 9 || span != pressureWindow {
		t.Fatalf("after an hour: %.1f%%, %.1f%% over %v; want the avg10 values", cpu, io, span)
	}
}

func TestReadSome(t *testing.T) {
	dir := t.TempDir()
	for body, ok := range map[string]bool{
		"some avg10=1.50 avg60=0.50 avg300=0.10 total=2500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n": true,
		"full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n":                                                       false,
		"some avg10=x total=1\n": false,
		"":                       false,
	} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		avg, total, err := readSome(p)
		if (err == nil) != ok || ok && (avg != 1.5 || total != 2500*time.Millisecond) {
			t.Errorf("%q: %v, %v, %v", body, avg, total, err)
		}
	}
}
