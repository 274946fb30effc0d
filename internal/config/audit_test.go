package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestAuditLoads(t *testing.T) {
	p := writeFile(t, `
[audit]
every = "14d"
windows = ["mon-fri 01:00-06:00", "sat,sun 22:00-07:00"]
time_limit = "5h"
max_rate = "25 MB/s"
workers = 2
max_load = -1.0
ignore_battery = true
jitter = "-1s"
on_problem = ["notify-send", "annexd"]
on_problem_every = "1d12h"
disabled = true
heal = "local"
heal_keep = "7d"
`)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Audit{Every: Duration(14 * 24 * time.Hour), Windows: []string{"mon-fri 01:00-06:00", "sat,sun 22:00-07:00"},
		TimeLimit: Duration(5 * time.Hour), MaxRate: 25_000_000, Workers: 2, MaxLoad: -1, IgnoreBattery: true,
		Jitter: Duration(-time.Second), OnProblem: []string{"notify-send", "annexd"}, OnProblemEvery: Duration(36 * time.Hour),
		Disabled: true, Heal: "local", HealKeep: Duration(7 * 24 * time.Hour)}
	if !reflect.DeepEqual(c.Audit, want) {
		t.Errorf("loaded %+v, want %+v", c.Audit, want)
	}
}

func TestParseRate(t *testing.T) {
	cases := map[string]Rate{"25MB": 25e6, "25 MB/s": 25e6, "20MiB/s": 20 << 20, "4096": 4096, "off": Off, "0": Off, "-1": Off}
	for in, want := range cases {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"fast", "25 MB/h", "", "1.5MB"} {
		if _, err := ParseRate(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseRate(%q) accepted", in)
		}
	}
}

func TestParseDuration(t *testing.T) {
	cases := map[string]time.Duration{"30d": 30 * 24 * time.Hour, "720h": 720 * time.Hour, "1d12h": 36 * time.Hour,
		"0d": 0, "90m": 90 * time.Minute, "-1s": -time.Second, "0.5d": 12 * time.Hour}
	for in, want := range cases {
		if got, err := ParseDuration(in); err != nil || got.D() != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "30", "d", "30days", "1h30d", "xd"} {
		if _, err := ParseDuration(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseDuration(%q) accepted", in)
		}
	}
}

// A bad value is an error that names the file, the key and what to write
// (a value that does not decode is toml's error, with the line).
func TestAuditBadValues(t *testing.T) {
	cases := map[string]string{
		`every = "30 days"`:        `"30d"`,
		`every = 30`:               `"30d"`,
		`max_rate = "fast"`:        `"25 MB/s"`,
		`time_limit = "-1h"`:       `audit.time_limit`,
		`workers = -1`:             `audit.workers`,
		`on_problem = [""]`:        `audit.on_problem`,
		`windows = [" "]`:          `audit.windows`,
		`every = "-3d"`:            `audit.every`,
		`on_problem_every = "-1m"`: `audit.on_problem_every`,
	}
	for line, fix := range cases {
		p := writeFile(t, "[audit]\n"+line+"\n")
		c, err := Load(p)
		if err == nil {
			if err = c.Fill(); err == nil {
				err = c.Validate()
			}
		}
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), fix) ||
			!strings.Contains(err.Error(), ErrInvalid.Error()) {
			t.Errorf("%s: err = %v; want the file, %s", line, err, fix)
		}
		if name := "audit." + strings.Fields(line)[0]; !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v; want the key %s", line, err, name)
		}
	}
}

// A heal mode that is not one names the key, the file and the values.
func TestAuditHealMode(t *testing.T) {
	p := writeFile(t, "[audit]\nheal = \"yes\"\n")
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fill(); err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if err == nil || !strings.Contains(err.Error(), `audit.heal = "yes" in `+p) || !strings.Contains(err.Error(), `"off", "ask" (the default), "local" or "any"`) {
		t.Fatalf("heal = yes: %v", err)
	}
}
