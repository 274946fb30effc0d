package config

import (
	"fmt"
	"time"
)

// Defaults of the [dedup] section. Fill applies them.
const (
	DefaultDedupQuiet    = 5 * time.Minute
	DefaultDedupInterval = time.Minute
	DefaultDedupRate     = Size(64 << 20)
	DefaultDedupMinSize  = Size(1)
	DefaultDedupWorkers  = 4
	DefaultDedupMaxLoad  = 1.0
	// DefaultMaxPressure is max_pressure of [dedup] and [audit]: percent
	// of the time.
	DefaultMaxPressure = 40.0
)

// Dedup configures deduplication: how runs asked through the API work,
// and the background mode.
type Dedup struct {
	// Continuous deduplicates duplicates in the background, reflink only.
	Continuous bool `toml:"continuous"`
	// Quiet is how long both files of a pair must be left alone first.
	Quiet time.Duration `toml:"quiet"`
	// Interval is how often the background mode plans again.
	Interval time.Duration `toml:"interval"`
	// Rate bounds the bytes a second the background mode deduplicates.
	Rate Size `toml:"rate"`
	// MinSize leaves smaller files to the runs asked for.
	MinSize Size `toml:"min_size"`
	// Workers is how many groups a run works on at once.
	Workers int `toml:"workers"`
	// MaxPressure pauses the background mode while tasks wait for a CPU,
	// or for I/O, more than this percent of the time (Linux's pressure
	// stall information); negative: never. Unset while MaxLoad is
	// negative, it is never too.
	MaxPressure float64 `toml:"max_pressure"`
	// MaxLoad stands in for MaxPressure where the kernel has no pressure
	// information: it pauses the background mode while the load average
	// per CPU is above it; negative: never.
	MaxLoad float64 `toml:"max_load"`
	// IgnoreBattery keeps the background mode going on battery.
	IgnoreBattery bool `toml:"ignore_battery"`
}

func (d *Dedup) fill() {
	if d.Quiet == 0 {
		d.Quiet = DefaultDedupQuiet
	}
	if d.Interval == 0 {
		d.Interval = DefaultDedupInterval
	}
	if d.Rate == 0 {
		d.Rate = DefaultDedupRate
	}
	if d.MinSize == 0 {
		d.MinSize = DefaultDedupMinSize
	}
	if d.Workers == 0 {
		d.Workers = DefaultDedupWorkers
	}
	d.MaxPressure = fillPressure(d.MaxPressure, d.MaxLoad)
	if d.MaxLoad == 0 {
		d.MaxLoad = DefaultDedupMaxLoad
	}
}

// fillPressure is max_pressure's value once filled: the default when it
// is unset, unless max_load is negative. That said "never pause for a
// busy machine" before the pressure gate came, and still does.
func fillPressure(maxPressure, maxLoad float64) float64 {
	switch {
	case maxPressure != 0:
		return maxPressure
	case maxLoad < 0:
		return -1
	}
	return DefaultMaxPressure
}

func (d *Dedup) validate(c *Config) error {
	switch {
	case d.Quiet < 0:
		return c.invalid("dedup.quiet", d.Quiet.String(), "a duration ≥ 0")
	case d.Interval < 0:
		return c.invalid("dedup.interval", d.Interval.String(), "a duration ≥ 0")
	case d.Workers < 1:
		return c.invalid("dedup.workers", fmt.Sprint(d.Workers), "a count ≥ 1")
	case d.MaxPressure > 100:
		return c.invalid("dedup.max_pressure", fmt.Sprint(d.MaxPressure), "a percent of the time up to 100, or negative for never")
	}
	return nil
}
