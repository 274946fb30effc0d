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
	// MaxLoad pauses the background mode while the load average per CPU
	// is above it; negative: never.
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
	if d.MaxLoad == 0 {
		d.MaxLoad = DefaultDedupMaxLoad
	}
}

func (d *Dedup) validate(c *Config) error {
	switch {
	case d.Quiet < 0:
		return c.invalid("dedup.quiet", d.Quiet.String(), "a duration ≥ 0")
	case d.Interval < 0:
		return c.invalid("dedup.interval", d.Interval.String(), "a duration ≥ 0")
	case d.Workers < 1:
		return c.invalid("dedup.workers", fmt.Sprint(d.Workers), "a count ≥ 1")
	}
	return nil
}
