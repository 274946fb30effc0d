package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A root given through a symlink (annexd ~/picslink): the daemon resolves
// it once and indexes under the resolved path, which whereis, dups and
// status print; a file is found by either spelling, absolute, relative or
// in batch, including a file written after the start.
func TestSymlinkedRoot(t *testing.T) {
	t.Parallel()
	base, err := os.MkdirTemp("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	base, _ = filepath.EvalSymlinks(base)
	t.Cleanup(func() { os.RemoveAll(base) })
	real, link := filepath.Join(base, "pics"), filepath.Join(base, "picslink")
	write(t, filepath.Join(real, "cat.jpg"), "a cat")
	write(t, filepath.Join(real, "sub/copy.jpg"), "a cat")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	d := startOn(t, base, link)
	want := calckey(t, filepath.Join(real, "cat.jpg"))

	for _, p := range []string{filepath.Join(real, "cat.jpg"), filepath.Join(link, "cat.jpg")} {
		if r := d.ctl("", "lookup", p); r.code != 0 || strings.TrimSpace(r.stdout) != want {
			t.Errorf("lookup %s: exit %d %q %q; want %s", p, r.code, r.stdout, r.stderr, want)
		}
	}
	for _, dir := range []string{real, link} {
		env := append(append([]string{}, d.env...), "PWD="+dir)
		if r := runCtl(t, env, dir, "", "lookup", "sub/copy.jpg"); r.code != 0 || strings.TrimSpace(r.stdout) != want {
			t.Errorf("relative in %s: exit %d %q %q", dir, r.code, r.stdout, r.stderr)
		}
	}
	batch := filepath.Join(link, "sub/copy.jpg") + "\n" + filepath.Join(real, "sub/copy.jpg") + "\n"
	if r := d.ctl(batch, "lookup", "--batch"); r.code != 0 || r.stdout != want+"\n"+want+"\n" {
		t.Errorf("batch by both spellings: exit %d %q %q", r.code, r.stdout, r.stderr)
	}

	stored := filepath.Join(real, "cat.jpg") + "\n" + filepath.Join(real, "sub/copy.jpg") + "\n"
	if r := d.ctl("", "whereis", filepath.Join(link, "cat.jpg")); r.code != 0 || r.stdout != stored {
		t.Errorf("whereis prints the resolved spelling: exit %d %q %q; want %q", r.code, r.stdout, r.stderr, stored)
	}
	if r := d.ctl("", "dups"); r.code != 0 || !strings.Contains(r.stdout, filepath.Join(real, "cat.jpg")) || strings.Contains(r.stdout, link) {
		t.Errorf("dups: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := d.ctl("", "status", "--json")
	var st struct {
		Roots []struct{ Path string } `json:"roots"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Roots) != 1 || st.Roots[0].Path != real {
		t.Errorf("status roots: %v %s, want %s", err, r.stdout, real)
	}

	// Written after the start, through the link.
	f := filepath.Join(link, "new/dog.jpg")
	write(t, f, "a dog")
	if r := d.ctl("", "lookup", "--wait", f); r.code != 0 || strings.TrimSpace(r.stdout) != calckey(t, f) {
		t.Errorf("new file by the link: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := d.ctl("", "lookup", filepath.Join(base, "picslinkx/cat.jpg")); r.code != 1 || !strings.Contains(r.stderr, "not under any directory annexd watches") {
		t.Errorf("a sibling of the link: exit %d %q", r.code, r.stderr)
	}
}
