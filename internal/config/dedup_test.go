package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDedupDefaults(t *testing.T) {
	var c Config
	if err := c.Fill(); err != nil {
		t.Fatal(err)
	}
	want := Dedup{Quiet: 5 * time.Minute, Interval: time.Minute, Rate: 64 << 20, MinSize: 1, Workers: 4, MaxPressure: 40, MaxLoad: 1}
	if c.Dedup != want {
		t.Errorf("defaults %+v, want %+v", c.Dedup, want)
	}
}

func TestDedupLoads(t *testing.T) {
	p := writeFile(t, `
[dedup]
continuous = true
quiet = "30s"
interval = "10s"
rate = "1MiB"
min_size = "4KiB"
workers = 2
max_load = -1.0
ignore_battery = true
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
	want := Dedup{Continuous: true, Quiet: 30 * time.Second, Interval: 10 * time.Second, Rate: 1 << 20,
		MinSize: 4 << 10, Workers: 2, MaxPressure: -1, MaxLoad: -1, IgnoreBattery: true}
	if c.Dedup != want {
		t.Errorf("loaded %+v, want %+v", c.Dedup, want)
	}
}

func TestDedupUnknownKey(t *testing.T) {
	p := writeFile(t, "[dedup]\ncontinous = true\n")
	_, err := Load(p)
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), `"dedup.continous"`) || !strings.Contains(err.Error(), p) {
		t.Errorf("err = %v; want the key and the file named", err)
	}
}

func TestDedupValidateRejects(t *testing.T) {
	cases := map[string]func(*Dedup){
		"dedup.quiet":    func(d *Dedup) { d.Quiet = -time.Second },
		"dedup.interval": func(d *Dedup) { d.Interval = -time.Second },
		"dedup.workers":  func(d *Dedup) { d.Workers = -2 },
	}
	for name, mod := range cases {
		var c Config
		if err := c.Fill(); err != nil {
			t.Fatal(err)
		}
		mod(&c.Dedup)
		if err := c.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}
