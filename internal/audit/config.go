package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Defaults of Config. Fill applies them.
const (
	DefaultEvery          = 30 * 24 * time.Hour
	DefaultMaxRate        = 25_000_000 // bytes a second
	DefaultWorkers        = 1
	DefaultMaxLoad        = 1.0  // per CPU
	DefaultMaxPressure    = 40.0 // percent of the time
	DefaultJitter         = 10 * time.Minute
	DefaultOnProblemEvery = time.Minute
	DefaultGatePoll       = 5 * time.Second
)

// Config is the [audit] section of the configuration. The zero value
// works once Fill has run.
type Config struct {
	// Every is how often each file is verified at least; default 30 days.
	Every time.Duration
	// Windows restrict scheduled runs to these times of the week, in local
	// time: "01:00-06:00" (every day), "mon-fri 01:00-06:00",
	// "sat,sun 22:00-07:00" (past midnight). Empty: any time.
	Windows []string
	// TimeLimit ends a scheduled run after this long; the pass goes on at
	// the next run. 0: no limit.
	TimeLimit time.Duration
	// MaxRate caps reading, in bytes a second; default 25 MB/s, negative
	// for no cap. A run started with full speed ignores it.
	MaxRate int64
	// Workers read files at once; default 1.
	Workers int
	// MaxPressure pauses the audit while tasks wait for a CPU, or for
	// I/O, more than this percent of the time (Linux's pressure stall
	// information), the audit's own waits left out; default 40, negative
	// for never. Unset while MaxLoad is negative, it is never too.
	MaxPressure float64
	// MaxLoad stands in for MaxPressure where the kernel has no pressure
	// information: it pauses the audit while the load average per CPU,
	// less the audit's own readers, is above it; default 1.0, negative
	// for never.
	MaxLoad float64
	// IgnoreBattery keeps auditing on a discharging battery.
	IgnoreBattery bool
	// Jitter delays each scheduled run by a random part of it; default
	// 10 minutes, negative for none.
	Jitter time.Duration
	// OnProblem is a command (program and arguments, no shell) run with a
	// problem's JSON on its standard input.
	OnProblem []string
	// OnProblemEvery is the least time between two runs of OnProblem;
	// default a minute. The last problem in between is sent after it.
	OnProblemEvery time.Duration
	// Disabled turns scheduled runs off; runs started by hand still work.
	Disabled bool
	// GatePoll is how often closed gates are looked at again; default 5 s.
	GatePoll time.Duration
}

// Fill sets the defaults of zero fields.
func (c *Config) Fill() {
	if c.Every <= 0 {
		c.Every = DefaultEvery
	}
	if c.MaxRate == 0 {
		c.MaxRate = DefaultMaxRate
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.MaxPressure == 0 {
		// max_load = -1 said "never pause for a busy machine" before
		// the pressure gate came; it still does.
		c.MaxPressure = DefaultMaxPressure
		if c.MaxLoad < 0 {
			c.MaxPressure = -1
		}
	}
	if c.MaxLoad == 0 {
		c.MaxLoad = DefaultMaxLoad
	}
	if c.Jitter == 0 {
		c.Jitter = DefaultJitter
	}
	if c.OnProblemEvery <= 0 {
		c.OnProblemEvery = DefaultOnProblemEvery
	}
	if c.GatePoll <= 0 {
		c.GatePoll = DefaultGatePoll
	}
}

// Validate checks a filled Config.
func (c *Config) Validate() error {
	if _, err := parseWindows(c.Windows); err != nil {
		return err
	}
	if c.TimeLimit < 0 {
		return fmt.Errorf("%w: time_limit %s is negative", ErrConfig, c.TimeLimit)
	}
	return nil
}

// writebackOf is how long Linux may keep written data in memory:
// vm.dirty_expire_centisecs (when a dirty page is old enough to write) plus
// vm.dirty_writeback_centisecs (how often the flusher looks), plus 30 s for
// the write itself and the file system's journal commit.
func writebackOf(procDir string) time.Duration {
	cs := func(name, def string) time.Duration {
		b, err := os.ReadFile(filepath.Join(procDir, "sys", "vm", name))
		s := strings.TrimSpace(string(b))
		if err != nil {
			s = def
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			n, _ = strconv.ParseInt(def, 10, 64)
		}
		return time.Duration(n) * 10 * time.Millisecond
	}
	return cs("dirty_expire_centisecs", "3000") + cs("dirty_writeback_centisecs", "500") + 30*time.Second
}
