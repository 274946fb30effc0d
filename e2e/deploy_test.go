package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
)

// buildAs builds annexd and annexctl into dir with extra go build flags.
func buildAs(t *testing.T, dir string, flags ...string) {
	t.Helper()
	args := append([]string{"build", "-o", dir + "/"}, flags...)
	cmd := exec.Command("go", append(args, "./cmd/annexd", "./cmd/annexctl")...)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
}

// Built without version control stamping (a source tarball, or
// -buildvcs=false), with the version stamped as the Dockerfile and the
// install steps do, both programs and the daemon's status say it.
func TestVersionStamped(t *testing.T) {
	dir := t.TempDir()
	const v = "9.8.7-e2e"
	buildAs(t, dir, "-buildvcs=false", "-ldflags", "-X github.com/annexd/annexd/internal/version.Stamp="+v)
	for _, prog := range []string{"annexd", "annexctl"} {
		out, err := exec.Command(filepath.Join(dir, prog), "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), prog+" "+v+" (go") {
			t.Errorf("%s --version: %q, %v; want %q", prog, out, err, prog+" "+v)
		}
	}
	base, root := newRoot(t, nil)
	d := spawn(t, annexdRun{base: base, roots: []string{root}, exe: filepath.Join(dir, "annexd")})
	d.waitIdle()
	var st api.Status
	if r := d.ctl("", "status", "--json"); json.Unmarshal([]byte(r.stdout), &st) != nil || st.Version != v {
		t.Errorf("status: version %q, want %q (%s)", st.Version, v, r.stdout)
	}
}

// A config that needs IP sockets ([publish] hub) where the process may
// not open them, as under the systemd unit's RestrictAddressFamilies=
// AF_UNIX, stops the start with exit 2 and the fix, instead of a daemon
// that never publishes.
func TestNoNetworkSaysTheUnitSetting(t *testing.T) {
	noinet := filepath.Join(t.TempDir(), "noinet")
	cmd := exec.Command("go", "build", "-o", noinet, "./e2e/testdata/noinet")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build noinet: %v\n%s", err, out)
	}
	base, root := newRoot(t, nil)
	pw := filepath.Join(base, "hub.password")
	write(t, pw, "a password of the host")
	conf := filepath.Join(base, "annexd.toml")
	write(t, conf, "[publish]\nhub = \"tls://127.0.0.1:1\"\nname = \"laptop\"\npassword_file = \""+pw+"\"\n")
	d := spawn(t, annexdRun{base: base, roots: []string{root}, wrap: []string{noinet}, extra: []string{"-c", conf}})
	code := d.exit(time.Minute)
	log := d.log.String()
	if code != 2 || !strings.Contains(log, "[publish] hub") || !strings.Contains(log, "RestrictAddressFamilies=") ||
		!strings.Contains(log, "AF_INET") {
		t.Errorf("[publish] without IP sockets: exit %d, %q; want exit 2 naming RestrictAddressFamilies and AF_INET", code, log)
	}
}

// A hub whose hosts use an nkey and a bcrypt hash holds no plaintext
// password: nats-server's warning about them is not in the log.
func TestHubNoPlaintextWarning(t *testing.T) {
	s := newHubSetup(t, "")
	s.nas.start()
	defer s.nas.stop()
	s.nas.caughtUp()
	if log := s.nas.d.log.String(); strings.Contains(log, "Plaintext passwords") {
		t.Errorf("the hub warns of plaintext passwords:\n%s", log)
	}
}
