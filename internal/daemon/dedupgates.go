package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/annexd/annexd/internal/dedup"
)

// dedupGates are what pause background deduplication: the indexer's
// work, the load average per CPU above [dedup] max_load, a discharging
// battery unless [dedup] ignore_battery.
func (a *App) dedupGates() []dedup.Gate {
	gs := []dedup.Gate{idleGate{a.ix}}
	if m := a.cfg.Dedup.MaxLoad; m > 0 {
		gs = append(gs, loadGate{max: m, ncpu: max(runtime.NumCPU(), 1), proc: "/proc"})
	}
	if !a.cfg.Dedup.IgnoreBattery {
		gs = append(gs, batteryGate{sys: "/sys"})
	}
	return gs
}

// idleGate is busy while the indexer has work: it reads and writes the
// files the background mode would compare.
type idleGate struct{ ix interface{ Idle() bool } }

func (g idleGate) Busy() (string, bool) {
	if !g.ix.Idle() {
		return "the indexer has work", true
	}
	return "", false
}

// loadGate is busy while the one-minute load average per CPU, less the
// one pair the background mode works on, is above max.
type loadGate struct {
	max  float64
	ncpu int
	proc string // "/proc" but in tests
}

func (g loadGate) Busy() (string, bool) {
	b, err := os.ReadFile(filepath.Join(g.proc, "loadavg"))
	if err != nil {
		return "", false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "", false
	}
	l, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", false
	}
	if per := max(l-1, 0) / float64(g.ncpu); per > g.max {
		return fmt.Sprintf("load average %.2f per CPU is above %.2f", per, g.max), true
	}
	return "", false
}

// batteryGate is busy while a battery discharges and no mains or USB
// supply is online.
type batteryGate struct{ sys string } // "/sys" but in tests

func (g batteryGate) Busy() (string, bool) {
	dir := filepath.Join(g.sys, "class", "power_supply")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", false
	}
	read := func(name, attr string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name, attr))
		return strings.TrimSpace(string(b))
	}
	discharging := false
	for _, e := range entries {
		switch read(e.Name(), "type") {
		case "Battery":
			discharging = discharging || read(e.Name(), "status") == "Discharging"
		case "Mains", "USB", "USB_C", "USB_PD":
			if read(e.Name(), "online") == "1" {
				return "", false
			}
		}
	}
	if discharging {
		return "on battery, discharging", true
	}
	return "", false
}
