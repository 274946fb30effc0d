package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annexd/annexd/internal/loopfs"
)

// The real annexd and annexctl heal a file the audit found corrupt on
// XFS: --dry-run says it would, from the copy, and touches nothing; the
// heal restores the bytes, exits 0, keeps the rotten bytes aside, and the
// finding is gone; the JSON answer has the documented fields; a file
// whose only copy is rotten too is "no_copy" with the count, exit 1; an
// accept removes the rotten bytes kept aside.
func TestAuditHeal(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: loopfs.MinSize[loopfs.XFS]})
	root := fs.Path("home")
	victim, backup := filepath.Join(root, "photo.jpg"), filepath.Join(root, "old", "photo.jpg")
	lone, loneCopy := filepath.Join(root, "lone.bin"), filepath.Join(root, "lone-copy.bin")
	writeAged(t, victim, 7, 300<<10)
	writeAged(t, lone, 8, 100<<10)
	if err := os.MkdirAll(filepath.Dir(backup), 0o755); err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{victim: backup, lone: loneCopy} {
		b, _ := os.ReadFile(from)
		writeAged(t, to, 0, 0)
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	good, _ := os.ReadFile(victim)
	d := startOn(t, dedupBase(t, auditConf), root)
	fs.Sync(t)
	for _, p := range []string{victim, lone, loneCopy} {
		fs.FlipByte(t, p, 1000)
	}
	if r := d.ctl("", "audit", "run", "--wait", "--full-speed"); r.code != 4 {
		t.Fatalf("audit run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	rotten, _ := os.ReadFile(victim)

	r := d.ctl("", "audit", "heal", "--dry-run", victim)
	if r.code != 0 || r.stdout != "would heal "+victim+" from "+backup+"\n" {
		t.Fatalf("dry run: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(victim); !bytes.Equal(b, rotten) {
		t.Fatal("a dry run changed the file")
	}

	r = d.ctl("", "audit", "heal", "--json")
	if r.code != 1 {
		t.Fatalf("heal: exit %d, want 1 (one file has no healthy copy)\n%s%s\n%s", r.code, r.stdout, r.stderr, d.log)
	}
	var ans struct {
		Files []struct {
			Path, Key, Outcome, Source, Host, Aside, Reason string
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ans); err != nil {
		t.Fatalf("%v: %q", err, r.stdout)
	}
	got := map[string]string{}
	var aside string
	for _, f := range ans.Files {
		got[f.Path] = f.Outcome
		if f.Path == victim {
			aside = f.Aside
			if f.Source != backup || !strings.HasPrefix(f.Key, "SHA256E-s307200--") {
				t.Fatalf("healed file: %+v", f)
			}
		}
		if f.Path == lone && !strings.HasPrefix(f.Reason, "no verified copy: 0 of 1 copy healthy") {
			t.Fatalf("lone file: %+v", f)
		}
	}
	if got[victim] != "healed" || got[lone] != "no_copy" {
		t.Fatalf("outcomes %v\n%s", got, r.stdout)
	}
	if b, _ := os.ReadFile(victim); !bytes.Equal(b, good) {
		t.Fatal("the healed file does not hold its recorded bytes")
	}
	if b, _ := os.ReadFile(aside); !bytes.Equal(b, rotten) {
		t.Fatalf("the rotten bytes are not at %s", aside)
	}
	for _, p := range auditProblems(t, d) {
		if p["path"] == victim {
			t.Fatalf("the healed file is still listed: %v", p)
		}
	}
	if r := d.ctl("", "audit", "accept", victim); r.code != 0 || !strings.Contains(r.stdout, "removed the rotten bytes") {
		t.Fatalf("accept: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Lstat(aside); !os.IsNotExist(err) {
		t.Fatalf("aside after accept: %v", err)
	}
}
