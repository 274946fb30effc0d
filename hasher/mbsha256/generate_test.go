package mbsha256

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedKernelsUpToDate regenerates the assembly into a temporary
// directory and compares it with the committed files, so that the kernels
// are never edited by hand out of step with their generator.
func TestGeneratedKernelsUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go tool; skipped in -short mode")
	}
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool on PATH to run the generator: %v", err)
	}
	dir := t.TempDir()
	files := map[string]string{"avx512": "block_avx512_amd64.s", "avx2": "block_avx2_amd64.s", "shani": "block_shani_amd64.s"}
	args := []string{"run", "./internal/gen/main.go"}
	for flag, name := range files {
		args = append(args, "-"+flag, filepath.Join(dir, name))
	}
	if out, err := exec.Command(gotool, args...).CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
	for _, name := range files {
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the generator's output; run go generate", name)
		}
	}
}
