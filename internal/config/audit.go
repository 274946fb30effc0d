package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Audit configures the integrity audit. Zero fields take the audit's own
// defaults (internal/audit Config.Fill); the daemon checks the run windows
// with the audit's parser.
type Audit struct {
	// Every is how often each file is verified at least: "30d", "720h".
	Every Duration `toml:"every"`
	// Windows restrict scheduled runs to these times of the week:
	// "01:00-06:00", "mon-fri 01:00-06:00", "sat,sun 22:00-07:00".
	Windows []string `toml:"windows"`
	// TimeLimit ends a scheduled run after this long; 0: no limit.
	TimeLimit Duration `toml:"time_limit"`
	// MaxRate caps reading in bytes a second; Rate says how it is written.
	MaxRate Rate `toml:"max_rate"`
	// Workers read files at once.
	Workers int `toml:"workers"`
	// MaxPressure pauses the audit while tasks wait for a CPU, or for
	// I/O, more than this percent of the time (Linux's pressure stall
	// information); negative: never.
	MaxPressure float64 `toml:"max_pressure"`
	// MaxLoad stands in for MaxPressure where the kernel has no pressure
	// information: it pauses the audit while the load average per CPU is
	// above it; negative: never.
	MaxLoad float64 `toml:"max_load"`
	// IgnoreBattery keeps auditing on a discharging battery.
	IgnoreBattery bool `toml:"ignore_battery"`
	// Jitter delays each scheduled run by a random part of it; negative:
	// none.
	Jitter Duration `toml:"jitter"`
	// OnProblem is a program and its arguments, run with each problem's
	// JSON on its standard input.
	OnProblem []string `toml:"on_problem"`
	// OnProblemEvery is the least time between two runs of OnProblem.
	OnProblemEvery Duration `toml:"on_problem_every"`
	// Disabled turns scheduled runs off; runs asked for still work.
	Disabled bool `toml:"disabled"`
	// Heal says what happens to corrupt files after a pass: "off"
	// (nothing), "ask" (list what could be healed, touch nothing; the
	// default), "local" (heal from verified copies on this host), "any"
	// (and from other hosts through the hub). annexctl audit heal works
	// in every mode; it asks other hosts only with "any".
	Heal string `toml:"heal"`
	// HealKeep is how long a heal keeps the rotten bytes aside before
	// removing them (an accept removes them at once); default 30 days;
	// negative: until an accept.
	HealKeep Duration `toml:"heal_keep"`
}

// HealModes are the values of [audit] heal.
var HealModes = []string{"off", "ask", "local", "any"}

// DefaultHealKeep is the default of [audit] heal_keep.
const DefaultHealKeep = Duration(30 * 24 * time.Hour)

func (a *Audit) validate(c *Config) error {
	switch {
	case a.Every < 0:
		return c.invalid("audit.every", a.Every.String(), `a duration > 0 such as "30d" or "720h"`)
	case a.TimeLimit < 0:
		return c.invalid("audit.time_limit", a.TimeLimit.String(), `a duration ≥ 0 such as "5h" (0: no limit)`)
	case a.Workers < 0:
		return c.invalid("audit.workers", fmt.Sprint(a.Workers), "a count ≥ 1")
	case a.MaxPressure > 100:
		return c.invalid("audit.max_pressure", fmt.Sprint(a.MaxPressure), "a percent of the time up to 100, or negative for never")
	case a.OnProblemEvery < 0:
		return c.invalid("audit.on_problem_every", a.OnProblemEvery.String(), `a duration ≥ 0 such as "1m"`)
	case len(a.OnProblem) > 0 && strings.TrimSpace(a.OnProblem[0]) == "":
		return c.invalid("audit.on_problem", strings.Join(a.OnProblem, " "), `a program and its arguments, such as ["notify-send", "annexd audit"]`)
	}
	if a.Heal != "" && !slices.Contains(HealModes, a.Heal) {
		return c.invalid("audit.heal", a.Heal, `"off", "ask" (the default), "local" or "any"`)
	}
	for _, w := range a.Windows {
		if strings.TrimSpace(w) == "" {
			return c.invalid("audit.windows", w, `times of the week such as "mon-fri 01:00-06:00"`)
		}
	}
	return nil
}

// Duration is a time.Duration written as a string, which also takes a
// leading number of days: "30d", "1d12h", "720h", "90m".
type Duration time.Duration

// ParseDuration parses a Duration.
func ParseDuration(s string) (Duration, error) {
	t := strings.TrimSpace(s)
	neg := strings.HasPrefix(t, "-")
	t = strings.TrimPrefix(t, "-")
	var days float64
	if i := strings.IndexByte(t, 'd'); i >= 0 {
		n, err := strconv.ParseFloat(t[:i], 64)
		if err != nil || n < 0 || n > 1e5 {
			return 0, badDuration(s)
		}
		days, t = n, t[i+1:]
	}
	var rest time.Duration
	if t != "" {
		var err error
		if rest, err = time.ParseDuration(t); err != nil || rest < 0 {
			return 0, badDuration(s)
		}
	} else if days == 0 && !strings.Contains(s, "d") {
		return 0, badDuration(s)
	}
	d := time.Duration(days*float64(24*time.Hour)) + rest
	if neg {
		d = -d
	}
	return Duration(d), nil
}

func badDuration(s string) error {
	return fmt.Errorf(`%w: duration %q: want a number with a unit, such as "30d", "12h", "90m" or "1d12h"`, ErrInvalid, s)
}

// UnmarshalTOML accepts a string such as "30d" or "5h".
func (d *Duration) UnmarshalTOML(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf(`%w: duration %v: want a quoted string such as "30d" or "5h"`, ErrInvalid, v)
	}
	p, err := ParseDuration(s)
	*d = p
	return err
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d as time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// Rate is a cap in bytes a second: an integer, or a size with a unit and
// an optional "/s" ("25MB", "25 MB/s", "20MiB/s"). 0, "0", "off" and
// negative values mean no cap; Off stands for them after loading.
type Rate int64

// Off is the Rate of no cap.
const Off Rate = -1

// ParseRate parses a Rate.
func ParseRate(s string) (Rate, error) {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "off", "none", "0":
		return Off, nil
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil && n < 0 {
		return Off, nil
	}
	z, err := ParseSize(strings.TrimSpace(strings.TrimSuffix(t, "/s")))
	if err != nil {
		return 0, fmt.Errorf(`%w: rate %q: want bytes a second, such as 25000000, "25MB", "25 MB/s", or "off"`, ErrInvalid, s)
	}
	if z == 0 {
		return Off, nil
	}
	return Rate(z), nil
}

// UnmarshalTOML accepts an integer or a string (ParseRate).
func (r *Rate) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		*r = Rate(v)
		if v <= 0 {
			*r = Off
		}
		return nil
	case float64:
		if v <= 0 {
			*r = Off
			return nil
		}
		if v > math.MaxInt64/2 {
			break
		}
		*r = Rate(v)
		return nil
	case string:
		p, err := ParseRate(v)
		*r = p
		return err
	}
	return fmt.Errorf(`%w: rate %v: want bytes a second, such as 25000000 or "25 MB/s"`, ErrInvalid, v)
}
