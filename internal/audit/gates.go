package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Gate says whether the machine is too busy for background work now, and
// why. The audit waits while one is busy; so does background
// deduplication, which takes the same gates.
type Gate interface {
	Busy() (reason string, busy bool)
}

// IndexerGate is busy while the indexer works in bulk: a walk waits or
// runs, or many changes are queued. A trickle of changes, such as a log
// appended to, leaves it open: the audit leaves the files the indexer
// holds for later (Indexer.Busy) and reads the rest.
type IndexerGate struct {
	Indexer interface{ Bulk() bool }
}

// Busy implements Gate.
func (g IndexerGate) Busy() (string, bool) {
	if g.Indexer != nil && g.Indexer.Bulk() {
		return "the indexer is busy with a scan or many changes", true
	}
	return "", false
}

// LoadGate is busy while the one-minute load average per CPU is above
// Max. The caller's own threads, Own of them, are not counted. It stands
// in for PressureGate where the kernel has no pressure information: the
// load average also counts tasks that wait on I/O and runnable tasks that
// nobody waits for, so it calls a machine busy that serves everyone.
type LoadGate struct {
	Max     float64 // per CPU
	Own     int     // runnable threads of the caller itself
	CPUs    int     // 0: runtime.NumCPU()
	ProcDir string  // "": /proc
}

// Busy implements Gate. It is never busy when the load cannot be read.
func (g LoadGate) Busy() (string, bool) {
	l, err := loadAvg(or(g.ProcDir, "/proc"))
	if err != nil {
		return "", false
	}
	ncpu := g.CPUs
	if ncpu <= 0 {
		ncpu = max(runtime.NumCPU(), 1)
	}
	if per := max(l-float64(g.Own), 0) / float64(ncpu); per > g.Max {
		return fmt.Sprintf("load average %.2f per CPU is above max_load = %.2f", per, g.Max), true
	}
	return "", false
}

// BatteryGate is busy while a battery discharges and no mains or USB
// supply is online.
type BatteryGate struct {
	SysDir string // "": /sys
}

// Busy implements Gate.
func (g BatteryGate) Busy() (string, bool) {
	if onBattery(or(g.SysDir, "/sys")) {
		return "on battery, discharging", true
	}
	return "", false
}

// Gates are the gates of c: the indexer's bulk work; a busy machine, from
// the pressure stall information where the kernel has it (above
// c.MaxPressure, none when it is not positive) and else from the load
// average (above c.MaxLoad, none when it is not positive); a discharging
// battery unless c.IgnoreBattery. own threads of the caller are left out
// of the load; ownIO, if not nil, is the caller's own time waiting on
// I/O so far, left out of the I/O pressure. The pressure gate keeps
// state: build the gates once.
func Gates(ix interface{ Bulk() bool }, c *Config, own int, ownIO func() time.Duration, procDir, sysDir string) []Gate {
	var gs []Gate
	if ix != nil {
		gs = append(gs, IndexerGate{Indexer: ix})
	}
	if m := machineGate(c, own, ownIO, procDir); m != nil {
		gs = append(gs, m)
	}
	if !c.IgnoreBattery {
		gs = append(gs, BatteryGate{SysDir: sysDir})
	}
	return gs
}

// machineGate is the gate of a busy machine c asks for: pressure where
// the kernel tells it, else the load average; nil for none.
func machineGate(c *Config, own int, ownIO func() time.Duration, procDir string) Gate {
	if HasPressure(procDir) {
		if c.MaxPressure <= 0 {
			return nil
		}
		return &PressureGate{Max: c.MaxPressure, ProcDir: procDir, OwnIO: ownIO}
	}
	if c.MaxLoad <= 0 {
		return nil
	}
	return LoadGate{Max: c.MaxLoad, Own: own, ProcDir: procDir}
}

// gates are the audit's own: its readers are left out of the load, as
// many as run at the time, and their waits for I/O out of the pressure.
type gates struct {
	ix     Indexer
	c      Config
	sysDir string
	// machine is the pressure gate, kept from one look to the next; nil
	// where the kernel has none (then the load gate is made at each
	// look, with the readers of the time) or max_pressure is off.
	machine *PressureGate
	procDir string
}

func newGates(ix Indexer, c *Config, procDir, sysDir string, ownIO func() time.Duration) *gates {
	g := &gates{ix: ix, c: *c, procDir: procDir, sysDir: sysDir}
	if p, ok := machineGate(c, 0, ownIO, procDir).(*PressureGate); ok {
		g.machine = p
	}
	return g
}

// closed returns why the audit must wait, or "" when it may read. own is
// the number of the audit's readers counted in the load average.
func (g *gates) closed(own int) string {
	var list []Gate
	if g.ix != nil {
		list = append(list, IndexerGate{Indexer: g.ix})
	}
	switch {
	case g.machine != nil:
		list = append(list, g.machine)
	case !HasPressure(g.procDir) && g.c.MaxLoad > 0:
		list = append(list, LoadGate{Max: g.c.MaxLoad, Own: own, ProcDir: g.procDir})
	}
	if !g.c.IgnoreBattery {
		list = append(list, BatteryGate{SysDir: g.sysDir})
	}
	for _, gt := range list {
		if why, busy := gt.Busy(); busy {
			return why
		}
	}
	return ""
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// loadAvg returns the one-minute load average from procDir/loadavg.
func loadAvg(procDir string) (float64, error) {
	b, err := os.ReadFile(filepath.Join(procDir, "loadavg"))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("audit: empty loadavg")
	}
	return strconv.ParseFloat(f[0], 64)
}

// onBattery reports whether a battery under sysDir/class/power_supply is
// discharging while no mains or USB supply is online.
func onBattery(sysDir string) bool {
	dir := filepath.Join(sysDir, "class", "power_supply")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	read := func(name, attr string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name, attr))
		return strings.TrimSpace(string(b))
	}
	discharging := false
	for _, e := range entries {
		switch read(e.Name(), "type") {
		case "Battery":
			if read(e.Name(), "status") == "Discharging" {
				discharging = true
			}
		case "Mains", "USB", "USB_C", "USB_PD":
			if read(e.Name(), "online") == "1" {
				return false
			}
		}
	}
	return discharging
}
