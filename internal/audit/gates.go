package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// gates say when the machine is too busy for an audit: the indexer has
// work, the load average per CPU is above a threshold, or the machine runs
// on a discharging battery. None of these can be waited for, so a closed
// gate is looked at again every Config.GatePoll.
type gates struct {
	ix      Indexer
	maxLoad float64 // per CPU; <= 0: no load gate
	battery bool    // pause on a discharging battery
	procDir string
	sysDir  string
	ncpu    int
}

// closed returns why the audit must wait, or "" when it may read. own is
// the number of the audit's readers counted in the load average.
func (g *gates) closed(own int) string {
	if g.ix != nil && !g.ix.Idle() {
		return "the indexer has work"
	}
	if g.maxLoad > 0 {
		if l, err := loadAvg(g.procDir); err == nil {
			if per := (l - float64(own)) / float64(g.ncpu); per > g.maxLoad {
				return fmt.Sprintf("load average %.2f per CPU is above %.2f", per, g.maxLoad)
			}
		}
	}
	if g.battery && onBattery(g.sysDir) {
		return "on battery, discharging"
	}
	return ""
}

func newGates(ix Indexer, c *Config, procDir, sysDir string) *gates {
	return &gates{ix: ix, maxLoad: c.MaxLoad, battery: !c.IgnoreBattery, procDir: procDir, sysDir: sysDir,
		ncpu: max(runtime.NumCPU(), 1)}
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
