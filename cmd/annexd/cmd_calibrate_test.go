package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/annexd/annexd/hasher/calibrate"
)

// The built annexd prints a calibration whose JSON has every candidate and a
// policy.
func TestCalibrateCommand(t *testing.T) {
	bin := annexdBinary(t)
	// A budget that a loaded machine running the race detector cannot
	// exhaust, so that every step must have run.
	out, err := exec.Command(bin, "calibrate", "--json", "--budget", "60s").Output()
	if err != nil {
		t.Fatalf("annexd calibrate --json: %v", err)
	}
	var c calibrate.Calibration
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("output is not a calibration: %v\n%s", err, out)
	}
	if err := c.Policy.Validate(); err != nil || c.Policy.Workers < 1 || c.Policy.InlineMax <= 0 {
		t.Errorf("policy %+v: %v", c.Policy, err)
	}
	for _, name := range []string{calibrate.NameStd, "sha256sum", "openssl"} {
		if _, ok := c.Candidate(name); !ok {
			t.Errorf("candidate %s missing", name)
		}
	}
	if !c.Complete || !c.StillValid() {
		t.Errorf("a calibration with a 60 s budget: complete %v, StillValid %v; want both", c.Complete, c.StillValid())
	}

	table, err := exec.Command(bin, "calibrate").Output()
	if err != nil {
		t.Fatalf("annexd calibrate: %v", err)
	}
	for _, want := range []string{"SHA-256 CANDIDATE", "chosen policy", "inline_max", "external_min", "why:"} {
		if !strings.Contains(string(table), want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}
