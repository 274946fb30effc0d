package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// unitFile is the systemd user unit the README and docs point to.
const unitFile = "../../configs/annexd.service"

// TestServiceUnit: the unit passes `systemd-analyze verify --user` with
// annexd installed as its install steps say, and waits for readiness.
func TestServiceUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is needed to check configs/annexd.service (apt-get install systemd; .ci/run does)")
	}
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	start := regexp.MustCompile(`(?m)^ExecStart=%h/(\S+)/annexd `).FindStringSubmatch(unit)
	if start == nil {
		t.Fatalf("no ExecStart=%%h/…/annexd in the unit")
	}
	if !strings.Contains(unit, "GOBIN=~/"+start[1]+" go install ./cmd/annexd") {
		t.Errorf("the install steps do not put annexd in ~/%s, where ExecStart runs it", start[1])
	}
	if !strings.Contains(unit, "\nType=notify\n") {
		t.Error("the unit does not wait for annexd's readiness (Type=notify)")
	}

	home := t.TempDir()
	dir := filepath.Join(home, start[1])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	linkBinary(t, filepath.Join(dir, "annexd"))
	run := filepath.Join(home, "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", "--user", unitFile)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+run, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify --user: %v\n%s", err, out)
	}
}

// TestServiceUnitNetworkAndOrder: the unit's comment tells what needs IP
// sockets and how to allow them, and the unit is not ordered after the
// target that wants it.
func TestServiceUnitNetworkAndOrder(t *testing.T) {
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"[publish] hub", "[hub] listen", "[api] tcp", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit's comment does not say %q", want)
		}
	}
	wanted := regexp.MustCompile(`(?m)^WantedBy=(\S+)`).FindStringSubmatch(unit)
	if wanted != nil && regexp.MustCompile(`(?m)^After=.*\b`+regexp.QuoteMeta(wanted[1])).MatchString(unit) {
		t.Errorf("the unit is ordered after %s, which wants it", wanted[1])
	}
}

// TestDockerfileStampsVersion: the image's binaries carry the version
// given at build time, through the variable internal/version reads.
func TestDockerfileStampsVersion(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	if !strings.Contains(df, "ARG VERSION") || !strings.Contains(df, "-X github.com/annexd/annexd/internal/version.Stamp=${VERSION}") {
		t.Error("the Dockerfile does not stamp VERSION into internal/version.Stamp")
	}
	if strings.Contains(df, "annexd only reads it") {
		t.Error("the Dockerfile says annexd only reads the watched directory; dedup writes it")
	}
}
