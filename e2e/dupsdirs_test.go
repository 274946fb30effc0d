package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dirDup is one line of dups --dirs --json.
type dirDup struct {
	Kind        string `json:"kind"`
	Reclaimable int64  `json:"reclaimable"`
	Unknown     int64  `json:"unknown_files"`
	Folders     []struct {
		Path  string `json:"path"`
		Files int64  `json:"files"`
		Bytes int64  `json:"bytes"`
	} `json:"folders"`
}

// TestDupsDirs runs the real daemon (as nobody, so that a file can be
// unreadable) and annexctl dups --dirs on a tree with two copies of a
// folder under other names, a folder whose file is in another, folders
// of empty files and a folder holding an unreadable file. It checks the
// reports, their order, that nothing below a copy is reported again,
// the JSON, -z and plain forms, PATHs, and the exit statuses.
func TestDupsDirs(t *testing.T) {
	t.Parallel()
	base := newBase(t)
	l := asNobody(t, base)
	root := filepath.Join(base, "root")
	big, small, note := strings.Repeat("A", 5000), strings.Repeat("B", 3000), "N"
	for path, content := range map[string]string{
		"photos/2020/a.jpg": big, "photos/2020/b.jpg": small, "photos/notes.txt": note,
		"backup/photos-copy/2020/x.jpg": big, "backup/photos-copy/2020/y.jpg": small, "backup/photos-copy/n.txt": note,
		"part/a-again.jpg": big,
		"empty1/e":         "", "empty2/f": "",
		"locked/secret.jpg": "no key", "locked/c.jpg": small,
	} {
		write(t, filepath.Join(root, path), content)
	}
	if err := os.Chmod(filepath.Join(root, "locked/secret.jpg"), 0); err != nil {
		t.Fatal(err)
	}
	l.roots = []string{root}
	d := spawn(t, l)
	d.waitIdle()
	at := func(rel string) string { return filepath.Join(root, rel) }

	r := d.ctl("", "dups", "--dirs", "--json")
	if r.code != 1 || !strings.Contains(r.stderr, "not compared") {
		t.Errorf("dups --dirs --json: exit %d, want 1 (a folder not compared)\n%s", r.code, r.stderr)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var dd dirDup
		if err := json.Unmarshal([]byte(line), &dd); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		s := dd.Kind
		for _, f := range dd.Folders {
			s += " " + strings.TrimPrefix(f.Path, root+"/")
		}
		switch dd.Kind {
		case "identical":
			if dd.Folders[0].Files != 3 || dd.Folders[0].Bytes != 8001 || dd.Reclaimable <= 0 {
				t.Errorf("identical folders %+v: want 3 files, 8001 bytes, some reclaimable", dd)
			}
		case "unknown":
			if dd.Unknown != 1 {
				t.Errorf("unknown folder %+v: want 1 file with no key", dd)
			}
		}
		got = append(got, s)
	}
	want := []string{
		"identical backup photos",                // backup holds only photos-copy: the higher one stands for both
		"contained backup/photos-copy/2020 part", // the folder kept first
		"unknown locked",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("dups --dirs --json:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	r = d.ctl("", "dups", "--dirs", "-z")
	wantZ := at("backup") + "\x00" + at("photos") + "\x00\x00" + at("backup/photos-copy/2020") + "\x00" + at("part") + "\x00\x00"
	if r.code != 1 || r.stdout != wantZ {
		t.Errorf("dups --dirs -z: exit %d %q, want exit 1 %q", r.code, r.stdout, wantZ)
	}
	r = d.ctl("", "dups", "--dirs", "--bytes")
	if r.code != 1 || !strings.Contains(r.stdout, "identical: 2 folders, 3 files, 8001 B, ") ||
		!strings.Contains(r.stdout, "  in "+at("backup/photos-copy/2020")+"  (2 files, 8000 B)\n") ||
		!strings.Contains(r.stdout, "not compared: "+at("locked")+"  (1 file with no key yet)") ||
		!strings.Contains(r.stdout, "\n2 reports, ") {
		t.Errorf("dups --dirs --bytes: exit %d\n%s", r.code, r.stdout)
	}
	// A PATH keeps the reports with a folder there; nothing unknown below it.
	r = d.ctl("", "dups", "--dirs", "-z", at("part"))
	if r.code != 0 || r.stdout != at("backup/photos-copy/2020")+"\x00"+at("part")+"\x00\x00" {
		t.Errorf("dups --dirs -z part: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r = d.ctl("", "dups", "--dirs", "--limit", "1", "-z", at("empty1")); r.code != 0 || r.stdout != "" {
		t.Errorf("dups --dirs empty1: exit %d %q, want nothing (no bytes)", r.code, r.stdout)
	}
	if r = d.ctl("", "dups", "--dirs", "--all"); r.code != 2 {
		t.Errorf("dups --dirs --all: exit %d, want 2", r.code)
	}
	if r = d.ctl("", "dups", "--dirs", "/nonexistent/outside"); r.code != 2 {
		t.Errorf("dups --dirs outside the roots: exit %d, want 2\n%s", r.code, r.stderr)
	}
}
