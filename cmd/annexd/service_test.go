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
	if err := os.Rename(annexdBinary(t), filepath.Join(dir, "annexd")); err != nil {
		t.Fatal(err)
	}
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
