package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Build is a command of this module built once for all the tests of a
// test binary: a build links for seconds of CPU, more with the race
// detector. Its folder is open to all (a test may run the binary as
// another user); every test runs the same file and must not change it.
type Build struct {
	Pkg   string   // the command's import path
	Flags []string // go build flags, such as -race

	once     sync.Once
	dir, bin string
	err      error
}

// Binary builds the command on first use and returns its path.
func (b *Build) Binary(t testing.TB) string {
	t.Helper()
	b.once.Do(func() { b.bin, b.err = b.build() })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

func (b *Build) build() (string, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	if b.dir, err = os.MkdirTemp("", "annexd-build"); err != nil {
		return "", err
	}
	if err := os.Chmod(b.dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(b.dir, filepath.Base(b.Pkg))
	args := append(append([]string{"build"}, b.Flags...), "-o", bin, b.Pkg)
	if out, err := exec.Command(gobin, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s (this test builds the command and needs the go tool): %v\n%s", b.Pkg, err, out)
	}
	return bin, nil
}

// Remove removes the built command; TestMain calls it after the tests.
func (b *Build) Remove() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}
