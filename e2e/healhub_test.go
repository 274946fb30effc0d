package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/loopfs"
)

// healHubAudit is the laptop's [audit] section in TestHealAcrossHosts.
func healHubAudit(mode string) string {
	return auditConf + "heal = \"" + mode + "\"\n"
}

// healAnswer is the JSON of annexctl audit heal --json.
type healAnswer struct {
	Files []struct {
		Path, Key, Outcome, Source, Host, Aside, Reason string
	} `json:"files"`
}

// TestHealAcrossHosts runs the real annexd on three hosts, "nas" the
// hub. The laptop's only copy of a photo rots on an ext4 image, behind
// the file system's back; the desktop holds a good copy. With [audit]
// heal = "any": a dry run names the desktop and touches nothing; the
// heal restores the original bytes through the hub, keeps the rotten
// bytes aside and lifts the finding. With "local", or the hub down, the
// file is "no_copy" and the reason says why. Last, with "any" and the
// hub back, an audit pass alone heals the file.
func TestHealAcrossHosts(t *testing.T) {
	t.Parallel()
	s := newHubSetup(t, "")
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	s.laptop.root = fs.Path("home")
	victim := filepath.Join(s.laptop.root, "photos", "photo.jpg")
	writeAged(t, victim, 11, 300<<10)
	good, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(good)
	s.desktop.write(map[string]string{"backup/photo.jpg": string(good)})
	laptopConf := func(mode string) {
		s.laptop.writeConfig(s.publishConfig("laptop", "nkey_seed_file", filepath.Join(s.laptop.base, "hub.seed")) + healHubAudit(mode))
	}
	laptopConf("any")
	s.nas.start()
	s.desktop.start()
	s.laptop.start()
	for _, h := range s.hosts() {
		h.caughtUp()
	}
	rot := func() []byte {
		t.Helper()
		fs.Sync(t)
		fs.FlipByte(t, victim, 1000)
		if r := s.laptop.ctl("audit", "run", "--wait", "--full-speed", victim); r.code != 4 {
			t.Fatalf("audit run: exit %d, want 4 (corrupt)\n%s%s\n%s", r.code, r.stdout, r.stderr, s.laptop.d.log)
		}
		b, _ := os.ReadFile(victim)
		return b
	}
	rotten := rot()

	r := s.laptop.ctl("audit", "heal", "--dry-run", victim)
	if r.code != 0 || r.stdout != "would heal "+victim+" from host desktop\n" {
		t.Fatalf("dry run: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(victim); !bytes.Equal(b, rotten) {
		t.Fatal("a dry run changed the file")
	}

	f := healOne(t, s.laptop, victim, 0)
	if f.Outcome != "healed" || f.Host != "desktop" || f.Source != "" {
		t.Fatalf("heal: %+v\n%s", f, s.laptop.d.log)
	}
	if b, _ := os.ReadFile(victim); sha256.Sum256(b) != want {
		t.Fatal("the healed file does not hold the original's bytes")
	}
	if b, _ := os.ReadFile(f.Aside); !bytes.Equal(b, rotten) {
		t.Fatalf("the rotten bytes are not at %s", f.Aside)
	}
	stillFlagged(t, s.laptop, victim, false)

	// "local": other hosts are not asked.
	s.laptop.stop()
	laptopConf("local")
	s.laptop.start()
	rot()
	f = healOne(t, s.laptop, victim, 1)
	if f.Outcome != "no_copy" || !strings.Contains(f.Reason, `other hosts not asked ([audit] heal = "any" asks them)`) {
		t.Fatalf("heal = local: %+v", f)
	}

	// "any" with the hub down: no copy, and the reason says the hub is
	// not reached.
	s.laptop.stop()
	s.nas.stop()
	laptopConf("any")
	s.laptop.start()
	f = healOne(t, s.laptop, victim, 1)
	if f.Outcome != "no_copy" || !strings.Contains(f.Reason, "the hub is not connected") {
		t.Fatalf("heal with the hub down: %+v", f)
	}
	stillFlagged(t, s.laptop, victim, true)

	// The hub back: an audit pass alone heals the file ("any" heals on
	// its own after a pass).
	s.nas.start()
	s.nas.caughtUp() // connected: a holder not yet connected is asked again only 15 s after a minute's wait
	s.laptop.caughtUp()
	if r := s.laptop.ctl("audit", "run", "--wait", "--full-speed"); r.code != 4 {
		t.Fatalf("audit pass: exit %d, want 4\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Watched by lstat, not by reading: a reader holding the file open
	// makes the heal "busy" (its write lease), tried again only later.
	flagged, err := os.Lstat(victim)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(hubWait)
	for {
		if fi, err := os.Lstat(victim); err == nil && !os.SameFile(fi, flagged) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heal after the pass\n%s", s.laptop.d.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if b, _ := os.ReadFile(victim); sha256.Sum256(b) != want {
		t.Fatalf("the healed file does not hold the copy's bytes")
	}
	waitUnflagged(t, s.laptop, victim)
	// Two heals kept their rotten bytes aside: the first, and this one.
	if aside, _ := filepath.Glob(filepath.Join(filepath.Dir(victim), ".annexd-heal-*.rotten")); len(aside) != 2 {
		t.Fatalf("rotten bytes kept aside: %v, want 2 files", aside)
	}
}

// healOne runs audit heal --json of path on h and returns its one file;
// code is the exit status it must have.
func healOne(t *testing.T, h *hubHost, path string, code int) struct {
	Path, Key, Outcome, Source, Host, Aside, Reason string
} {
	t.Helper()
	r := h.ctl("audit", "heal", "--json", path)
	var ans healAnswer
	if err := json.Unmarshal([]byte(r.stdout), &ans); err != nil || r.code != code || len(ans.Files) != 1 {
		t.Fatalf("audit heal --json %s: exit %d (want %d) %q %q\n%s", path, r.code, code, r.stdout, r.stderr, h.d.log)
	}
	return ans.Files[0]
}

// stillFlagged fails the test unless audit problems lists path (flagged)
// or does not (!flagged).
func stillFlagged(t *testing.T, h *hubHost, path string, flagged bool) {
	t.Helper()
	listed := false
	for _, p := range auditProblems(t, h.d) {
		listed = listed || p["path"] == path
	}
	if listed != flagged {
		t.Fatalf("%s listed by audit problems: %v, want %v", path, listed, flagged)
	}
}

// waitUnflagged waits until audit problems no longer lists path.
func waitUnflagged(t *testing.T, h *hubHost, path string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		listed := false
		for _, p := range auditProblems(t, h.d) {
			listed = listed || p["path"] == path
		}
		if !listed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still flagged after its heal\n%s", path, h.d.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
