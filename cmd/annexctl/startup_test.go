package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// notForALookup are packages whose set-up a lookup must not pay for: the
// config file's parser, CPU feature probes beyond the runtime's, metrics,
// and the daemon's own configuration.
var notForALookup = []string{
	"github.com/BurntSushi/toml",
	"github.com/klauspost/cpuid",
	"github.com/minio/sha256-simd",
	"github.com/prometheus/",
	"github.com/annexd/annexd/internal/config",
}

// maxHasherInitBytes bounds what the hasher packages, linked for calckey,
// may allocate at start: a few small values, nothing compiled or probed.
const maxHasherInitBytes = 1024

// annexctl lookup initialises nothing a lookup does not need. The Go
// runtime's init trace lists every package that does work at start, with
// the bytes it allocates; the packages above must be absent, and the hasher
// packages nearly idle.
func TestLookupStartsLight(t *testing.T) {
	dir := t.TempDir()
	bin := buildAnnexctl(t)
	cmd := exec.Command(bin, "lookup", filepath.Join(dir, "nothing"))
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1", "ANNEXD_SOCKET="+filepath.Join(dir, "none.sock"))
	out, _ := cmd.CombinedOutput() // exit 3: no daemon; the trace is what counts
	inits := initTrace(out)
	if _, ok := inits["os"]; !ok {
		t.Fatalf("no init trace in the output:\n%s", out)
	}
	for pkg, bytes := range inits {
		for _, bad := range notForALookup {
			if strings.HasPrefix(pkg, bad) {
				t.Errorf("annexctl lookup initialises %s (%d bytes)", pkg, bytes)
			}
		}
		if strings.HasPrefix(pkg, "github.com/annexd/annexd/hasher") && bytes > maxHasherInitBytes {
			t.Errorf("%s allocates %d bytes at start; want at most %d", pkg, bytes, maxHasherInitBytes)
		}
	}
}

// initTrace maps each package in GODEBUG=inittrace=1 output to the bytes
// its init allocated. A line reads: init PKG @T ms, D ms clock, N bytes, M allocs.
func initTrace(out []byte) map[string]int {
	inits := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 9 || f[0] != "init" || f[8] != "bytes," {
			continue
		}
		if n, err := strconv.Atoi(f[7]); err == nil {
			inits[f[1]] = n
		}
	}
	return inits
}
