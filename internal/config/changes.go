package config

import "fmt"

// Changes bounds the change feed (annexctl changes). The index keeps it
// always; its oldest entries go once it holds Keep entries or they are
// older than MaxAge. A reader behind them resyncs.
type Changes struct {
	// Keep is how many changes are kept at most; 0: 1048576.
	Keep int `toml:"keep"`
	// MaxAge drops changes older than this ("90d", "2160h"); 0: 90 days.
	MaxAge Duration `toml:"max_age"`
	// Disabled keeps no feed (the entries kept are left until it is on again,
	// and then answer resync).
	Disabled bool `toml:"disabled"`
}

func (ch *Changes) validate(c *Config) error {
	switch {
	case ch.Keep < 0:
		return c.invalid("changes.keep", fmt.Sprint(ch.Keep), "a count ≥ 1 (0: the default)")
	case ch.MaxAge < 0:
		return c.invalid("changes.max_age", ch.MaxAge.String(), `a duration ≥ 0 such as "90d" (0: the default)`)
	}
	return nil
}
