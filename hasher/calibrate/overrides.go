package calibrate

import (
	"fmt"
	"os/exec"

	"github.com/annexd/annexd/hasher"
)

// Overrides are a config file's settings for the hasher, applied on top of
// a calibrated (or default) Policy. Zero fields keep the policy's value.
type Overrides struct {
	InlineMax int64 // > 0: the inline cutoff in bytes
	Workers   int   // > 0: the pool size
	// External is "auto" or "" (as calibrated), "never" (no external
	// program) or "always" (an external program for every SHA-256 file
	// from ExternalMin, or from the inline cutoff on).
	External    string
	ExternalMin int64 // > 0: the external cutoff in bytes
	Readers     int   // > 0: small files read at once per device
}

// Apply returns p with o applied. With External "always" and no program in
// p, the fastest verified program of the calibration c is used (c may be the
// zero Calibration: then openssl or sha256sum from PATH).
func (o Overrides) Apply(p hasher.Policy, c Calibration) (hasher.Policy, error) {
	if o.InlineMax > 0 {
		p.InlineMax = o.InlineMax
	}
	if o.Workers > 0 {
		p.Workers = o.Workers
	}
	if o.Readers > 0 {
		p.Readers = o.Readers
	}
	switch o.External {
	case "", "auto":
		if o.ExternalMin > 0 && p.External != "" {
			p.ExternalMin = o.ExternalMin
		}
	case "never":
		p.External, p.ExternalMin = "", 0
	case "always":
		if p.External == "" {
			prog, err := externalFor(c)
			if err != nil {
				return p, err
			}
			p.External = prog
		}
		p.ExternalMin = o.ExternalMin
		if p.ExternalMin <= 0 {
			p.ExternalMin = max(p.InlineMax, hasher.DefaultInlineMax) + 1
		}
	default:
		return p, fmt.Errorf("hasher: external = %q: want \"auto\", \"never\" or \"always\"", o.External)
	}
	return p, p.Validate()
}

func externalFor(c Calibration) (string, error) {
	if prog, ok := c.BestExternal(); ok {
		return prog, nil
	}
	for _, name := range []string{"openssl", "sha256sum"} {
		if prog, err := exec.LookPath(name); err == nil {
			return prog, nil
		}
	}
	return "", fmt.Errorf("hasher: external = \"always\" but neither openssl nor sha256sum is in PATH")
}
