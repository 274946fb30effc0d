package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Gate says whether the machine is too busy for background work now, and
// why. The audit waits while one is busy; so does background
// deduplication, which takes the same gates.
type Gate interface {
	Busy() (reason string, busy bool)
}

// IndexerGate is busy while the indexer has work.
type IndexerGate struct {
	Indexer interface{ Idle() bool }
}

// Busy implements Gate.
func (g IndexerGate) Busy() (string, bool) {
	if g.Indexer != nil && !g.Indexer.Idle() {
		return "the indexer has work", true
	}
	return "", false
}

// LoadGate is busy while the one-minute load average per CPU is above
// Max. The caller's own threads, Own of them, are not counted.
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
		return fmt.Sprintf("load average %.2f per CPU is above %.2f", per, g.Max), true
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

// Gates are the gates of c: the indexer's work, the load average above
// c.MaxLoad (none when it is not positive), a discharging battery unless
// c.IgnoreBattery. own threads of the caller are left out of the load.
func Gates(ix interface{ Idle() bool }, c *Config, own int, procDir, sysDir string) []Gate {
	var gs []Gate
	if ix != nil {
		gs = append(gs, IndexerGate{Indexer: ix})
	}
	if c.MaxLoad > 0 {
		gs = append(gs, LoadGate{Max: c.MaxLoad, Own: own, ProcDir: procDir})
	}
	if !c.IgnoreBattery {
		gs = append(gs, BatteryGate{SysDir: sysDir})
	}
	return gs
}

// gates are the audit's own: its readers are left out of the load, as
// many as run at the time.
type gates struct {
	ix      Indexer
	c       Config
	procDir string
	sysDir  string
}

func newGates(ix Indexer, c *Config, procDir, sysDir string) *gates {
	return &gates{ix: ix, c: *c, procDir: procDir, sysDir: sysDir}
}

// closed returns why the audit must wait, or "" when it may read. own is
// the number of the audit's readers counted in the load average.
func (g *gates) closed(own int) string {
	for _, gt := range Gates(g.ix, &g.c, own, g.procDir, g.sysDir) {
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
