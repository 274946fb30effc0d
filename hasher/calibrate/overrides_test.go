package calibrate

import (
	"context"
	"encoding/hex"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/key"
)

func TestOverridesApply(t *testing.T) {
	calibrated := hasher.Policy{InlineMax: 64 << 10, Workers: 2, SHA256: hasher.SHA256Std}
	cal := Calibration{Candidates: []Candidate{
		{Name: "sha256sum", Kind: KindExternal, Path: lookPath(t, "sha256sum"), Verified: true, MBps: 300},
		{Name: "openssl", Kind: KindExternal, Path: lookPath(t, "openssl"), Verified: true, MBps: 1000},
	}}
	p, err := Overrides{InlineMax: 1 << 20, Workers: 4}.Apply(calibrated, cal)
	if err != nil || p.InlineMax != 1<<20 || p.Workers != 4 || p.ExternalMin != 0 {
		t.Fatalf("inline/workers: %+v %v", p, err)
	}
	p, err = Overrides{External: "always"}.Apply(calibrated, cal)
	if err != nil || p.External != cal.Candidates[1].Path || p.ExternalMin != hasher.DefaultInlineMax+1 {
		t.Fatalf("always: %+v %v; want the faster verified program above the inline cutoff", p, err)
	}
	// The forced external program really hashes.
	path := filepath.Join(t.TempDir(), "f")
	writeFile(t, path, pattern(1<<20+1))
	h := hasher.New(p, nil)
	defer h.Close()
	res, err := h.Hash(context.Background(), path, key.SHA256)
	if err != nil || hex.EncodeToString(res.Digest) != sha256Vectors()[2].hex {
		t.Fatalf("hash with forced external: %x %v", res.Digest, err)
	}
	withExt := calibrated
	withExt.External, withExt.ExternalMin = "/usr/bin/openssl", 8<<20
	p, err = Overrides{External: "never"}.Apply(withExt, cal)
	if err != nil || p.External != "" || p.ExternalMin != 0 {
		t.Fatalf("never: %+v %v", p, err)
	}
	p, err = Overrides{ExternalMin: 32 << 20}.Apply(withExt, cal)
	if err != nil || p.ExternalMin != 32<<20 {
		t.Fatalf("auto with a cutoff: %+v %v", p, err)
	}
	if p, err = (Overrides{ExternalMin: 32 << 20}).Apply(calibrated, cal); err != nil || p.ExternalMin != 0 {
		t.Fatalf("auto when calibration chose none must stay none: %+v %v", p, err)
	}
	if _, err := (Overrides{External: "sometimes"}).Apply(calibrated, cal); err == nil {
		t.Fatal("bad external value accepted")
	}
}

func lookPath(t *testing.T, prog string) string {
	t.Helper()
	p, err := exec.LookPath(prog)
	if err != nil {
		t.Fatalf("%s is needed by this test: apt-get install coreutils openssl (%v)", prog, err)
	}
	return p
}
