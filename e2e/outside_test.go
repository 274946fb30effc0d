package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startOn runs annexd on the given roots with its index and socket under
// base (the same index each time) and waits until its first scan is done.
func startOn(t *testing.T, base string, roots ...string) *daemon {
	t.Helper()
	d := spawn(t, annexdRun{base: base, roots: roots})
	d.waitIdle()
	return d
}

// outsideStatus waits until the daemon has checked for records outside
// its roots and returns the status.
func outsideStatus(t *testing.T, d *daemon) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := d.ctl("", "status", "--json")
		var st map[string]any
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil {
			t.Fatalf("status --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if st["outside_roots_checked"] == true {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("outside_roots never checked: %s", r.stdout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A root dropped from the command line leaves records that status lists,
// dups hides (or marks with --all), and forget drops; forget refuses a
// directory under a root.
func TestRecordsOutsideRoots(t *testing.T) {
	t.Parallel()
	base, err := os.MkdirTemp("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	base, _ = filepath.EvalSymlinks(base)
	t.Cleanup(func() { os.RemoveAll(base) })
	a, b := filepath.Join(base, "A"), filepath.Join(base, "B")
	write(t, filepath.Join(a, "one.jpg"), "same content")
	write(t, filepath.Join(a, "sub/two.jpg"), "same content")
	write(t, filepath.Join(b, "three.jpg"), "same content")
	write(t, filepath.Join(b, "deep/four.jpg"), "same content")
	write(t, filepath.Join(b, "deep/only-b.txt"), "b's own")

	d := startOn(t, base, a, b)
	if r := d.ctl("", "dups", "--bytes"); r.code != 0 || !strings.Contains(r.stdout, "4 copies") {
		t.Fatalf("dups with both roots: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	d.stop()

	d = startOn(t, base, a)
	st := outsideStatus(t, d)
	out, _ := st["outside_roots"].([]any)
	if len(out) != 1 {
		t.Fatalf("outside_roots = %v, want B alone", st["outside_roots"])
	}
	if o := out[0].(map[string]any); o["path"] != b || o["files"] != 3.0 {
		t.Errorf("outside_roots[0] = %v, want %s with 3 files", o, b)
	}
	if r := d.ctl("", "status"); !strings.Contains(r.stdout, b+"  3 files") || !strings.Contains(r.stdout, "annexctl forget") {
		t.Errorf("status does not list %s and the fix:\n%s", b, r.stdout)
	}
	if !d.waitLog("outside the roots") {
		t.Errorf("no warning in the daemon's log:\n%s", d.log)
	}

	// Hidden by default: A's two copies, 12 bytes in the extra one.
	r := d.ctl("", "dups", "--bytes")
	if r.code != 0 || !strings.Contains(r.stdout, "\n1 group, ") || !strings.Contains(r.stdout, "of 12 B in extra copies") || strings.Contains(r.stdout, b) ||
		!strings.Contains(r.stderr, "files outside the roots are left out (the index holds 3 such records") {
		t.Errorf("dups: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = d.ctl("", "dups", "--bytes", "--all")
	if r.code != 0 || !strings.Contains(r.stdout, "4 copies × 12 B, ") || !strings.Contains(r.stdout, "of 36 B in extra copies") ||
		!strings.Contains(r.stdout, filepath.Join(b, "three.jpg")+"  [outside roots]") ||
		strings.Contains(r.stdout, filepath.Join(a, "one.jpg")+"  [outside roots]") {
		t.Errorf("dups --all: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = d.ctl("", "dups", "--all", "--json")
	var g struct {
		Duplicate int64 `json:"duplicate_bytes"`
		Files     []struct {
			Path         string `json:"path"`
			OutsideRoots bool   `json:"outside_roots"`
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(strings.SplitN(r.stdout, "\n", 2)[0]), &g); err != nil || len(g.Files) != 4 {
		t.Fatalf("dups --all --json: %v\n%s", err, r.stdout)
	}
	for _, f := range g.Files {
		if f.OutsideRoots != strings.HasPrefix(f.Path, b+"/") {
			t.Errorf("dups --json: %s outside_roots=%v", f.Path, f.OutsideRoots)
		}
	}
	r = d.ctl("", "whereis", filepath.Join(a, "one.jpg"))
	if r.code != 0 || strings.Count(r.stdout, "\n") != 4 || !strings.Contains(r.stderr, filepath.Join(b, "three.jpg")+": outside the roots") {
		t.Errorf("whereis: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A directory under a root is refused, and nothing is dropped.
	r = d.ctlIn(base, "", "forget", "B", "A/sub")
	if r.code != 2 || !strings.Contains(r.stderr, "next scan") || !strings.Contains(r.stderr, "nothing was dropped") {
		t.Errorf("forget B A/sub: exit %d, want 2\n%s%s", r.code, r.stdout, r.stderr)
	}
	// An empty DIR (an unset shell variable) is refused, not taken as the
	// current directory, which here holds B.
	r = d.ctlIn(base, "", "forget", "")
	if r.code != 2 || !strings.Contains(r.stderr, "empty") {
		t.Errorf("forget \"\": exit %d, want 2\n%s%s", r.code, r.stdout, r.stderr)
	}
	if st := outsideStatus(t, d); st["files"] != 5.0 {
		t.Fatalf(`forget "" dropped records: %v files left, want 5`, st["files"])
	}
	// A DIR inside another one given is covered by it: counted once, and
	// not "nothing to drop" once the outer one went.
	r = d.ctlIn(base, "", "forget", "--dry-run", "B/deep", "B")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "would forget 3 records at or below "+b {
		t.Errorf("forget --dry-run B/deep B: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = d.ctlIn(base, "", "forget", "B", "B/deep")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "forgot 3 records at or below "+b {
		t.Errorf("forget B B/deep: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	st = outsideStatus(t, d)
	if st["outside_roots"] != nil || st["files"] != 2.0 {
		t.Errorf("after forget: files %v, outside_roots %v", st["files"], st["outside_roots"])
	}
	if r := d.ctl("", "dups", "--all", "--bytes"); !strings.Contains(r.stdout, "\n1 group, ") || !strings.Contains(r.stdout, "of 12 B in extra copies") || strings.Contains(r.stdout, b) {
		t.Errorf("dups --all after forget:\n%s%s", r.stdout, r.stderr)
	}
	if r := d.ctlIn(base, "", "forget", "B"); r.code != 1 || !strings.Contains(r.stderr, "no records outside the roots") {
		t.Errorf("forget B again: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
}
