package simd_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/hasher/calibrate"
	_ "github.com/annexd/annexd/hasher/simd"
	"github.com/annexd/annexd/key"
)

// With the package linked, calibration weighs sha256-simd beside
// crypto/sha256 and chooses exactly one of them.
func TestCalibrationWeighsSIMD(t *testing.T) {
	// A minute's budget: on a loaded machine the default second can end
	// before a candidate is measured, and this test weighs, not hurries.
	c, err := calibrate.Run(context.Background(), calibrate.Options{Dir: t.TempDir(), Programs: []string{}, Budget: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	std, ok1 := c.Candidate(calibrate.NameStd)
	simd, ok2 := c.Candidate(calibrate.NameSIMD)
	if !ok1 || !ok2 || !std.Verified || !simd.Verified || simd.MBps <= 0 {
		t.Fatalf("candidates: %+v / %+v", std, simd)
	}
	if std.Chosen == simd.Chosen || string(c.Policy.SHA256) != map[bool]string{true: calibrate.NameStd, false: calibrate.NameSIMD}[std.Chosen] {
		t.Errorf("chosen: crypto/sha256 %v, sha256-simd %v, policy %q", std.Chosen, simd.Chosen, c.Policy.SHA256)
	}
	if err := c.Policy.Validate(); err != nil {
		t.Error(err)
	}
}

// A hasher told to use sha256-simd gives crypto/sha256's digests.
func TestSIMDDigests(t *testing.T) {
	p := hasher.DefaultPolicy()
	p.SHA256 = hasher.SHA256SIMD
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	h := hasher.New(p, nil)
	defer h.Close()
	dir := t.TempDir()
	for _, n := range []int{0, 1, 63, 64, 65, 4 << 10, 1<<20 + 7, 9 << 20} {
		data := bytes.Repeat([]byte{byte(n), 0x5a, byte(n >> 8)}, n/3+1)[:n]
		path := filepath.Join(dir, "f")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		res, err := h.Hash(context.Background(), path, key.SHA256E)
		if err != nil {
			t.Fatal(err)
		}
		if want := sha256.Sum256(data); !bytes.Equal(res.Digest, want[:]) {
			t.Errorf("%d bytes: digest %x, want %x", n, res.Digest, want)
		}
	}
}
