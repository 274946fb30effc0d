package calibrate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/hasher/mbsha256"
	"github.com/annexd/annexd/key"
)

// noAVX512Env tells TestCalibratedPolicyHashesRight that its process runs
// with AVX-512 turned off, so that it checks nothing picked it.
const noAVX512Env = "HASHER_TEST_NO_AVX512"

// The calibrated policy hashes files of every route right: small ones in
// the lanes, mid-sized ones read by the engine, large ones alone.
func TestCalibratedPolicyHashesRight(t *testing.T) {
	c, err := Run(context.Background(), testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(noAVX512Env) != "" {
		if slices.Contains(mbsha256.Kernels(), "avx512x16") || c.Policy.BatchKernel == "avx512x16" {
			t.Fatalf("with AVX-512 off: kernels %v, policy batch_kernel %q", mbsha256.Kernels(), c.Policy.BatchKernel)
		}
	}
	dir := t.TempDir()
	var paths []string
	var sums [][32]byte
	for i, size := range []int{1, 63, 64, 4095, 3000, 20 << 10, 64 << 10, 64<<10 + 1, 200 << 10, 1 << 20, 9 << 20} {
		for j := range 6 {
			data := pattern(size + j)
			p := filepath.Join(dir, fmt.Sprintf("f%02d-%d", i, j))
			writeFile(t, p, data)
			paths, sums = append(paths, p), append(sums, sha256.Sum256(data))
		}
	}
	h := hasher.New(c.Policy, nil)
	defer h.Close()
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.Hash(context.Background(), p, key.SHA256)
			if err != nil || !bytes.Equal(res.Digest, sums[i][:]) {
				t.Errorf("%s: digest %x, error %v", p, res.Digest, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("batch_kernel %q, streams %d", c.Policy.BatchKernel, h.Streams())
}

// Without AVX-512 (GODEBUG=cpu.avx512f=off, as on a CPU that lacks it)
// calibration picks another kernel and the hasher still hashes right.
func TestWithoutAVX512(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCalibratedPolicyHashesRight$", "-test.v")
	cmd.Env = append(os.Environ(), "GODEBUG=cpu.avx512f=off", noAVX512Env+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestCalibratedPolicyHashesRight") {
		t.Fatalf("child without AVX-512: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
