package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// haveAnswer is one line of have --json.
type haveAnswer struct {
	Path   string `json:"path"`
	State  string `json:"state"`
	Key    string `json:"key"`
	Error  string `json:"error"`
	Copies []struct {
		Path   string `json:"path"`
		Stale  bool   `json:"stale"`
		Absent *struct {
			Key   string `json:"key"`
			Point string `json:"mount_point"`
		} `json:"absent"`
	} `json:"copies"`
}

// haveJSON parses have --json output by path.
func haveJSON(t *testing.T, r result) map[string]haveAnswer {
	t.Helper()
	out := map[string]haveAnswer{}
	for line := range strings.Lines(r.stdout) {
		var a haveAnswer
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("have --json line %q: %v", line, err)
		}
		out[a.Path] = a
	}
	return out
}

// A camera card outside the roots, as the user the daemon runs as (so a
// file can be unreadable to both): what the index holds is "here", with
// the copy named; what it does not is "missing", and --missing lists just
// those; exit 1 until they are imported, then 0; an unreadable file is
// named on stderr, its own exit status (5), and the others still answer.
func TestHaveOutsideFolder(t *testing.T) {
	t.Parallel()
	needRoot(t, "run annexd and annexctl as uid nobody")
	if err := os.Chmod(bin.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	base := dedupBase(t, "")
	root, card := filepath.Join(base, "root"), filepath.Join(base, "card")
	write(t, filepath.Join(root, "photos/a.jpg"), "alpha")
	write(t, filepath.Join(root, "docs/b.txt"), "bravo")
	write(t, filepath.Join(card, "DCIM/A.JPG"), "alpha")     // here, under another name
	write(t, filepath.Join(card, "DCIM/sub/b.txt"), "bravo") // here
	write(t, filepath.Join(card, "DCIM/new1.jpg"), "new one")
	write(t, filepath.Join(card, "new2.jpg"), "new two")
	if err := os.Symlink("DCIM/A.JPG", filepath.Join(card, "link")); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{base} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(base, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	d := startAs(t, base, nobody, root)
	have := func(args ...string) result { return ctlAs(t, d, nobody, append([]string{"have"}, args...)...) }

	r := have(card)
	want := []string{
		"here:     " + card + "/DCIM/A.JPG -> " + root + "/photos/a.jpg",
		"missing:  " + card + "/DCIM/new1.jpg",
		"here:     " + card + "/DCIM/sub/b.txt -> " + root + "/docs/b.txt",
		"missing:  " + card + "/new2.jpg",
	}
	if r.code != 1 || r.stdout != strings.Join(want, "\n")+"\n" {
		t.Errorf("have CARD: exit %d, want 1\n%s%s\nwant:\n%s", r.code, r.stdout, r.stderr, strings.Join(want, "\n"))
	}
	r = have("--missing", "-z", card)
	if got := strings.Split(strings.TrimSuffix(r.stdout, "\x00"), "\x00"); r.code != 1 ||
		!slices.Equal(got, []string{card + "/DCIM/new1.jpg", card + "/new2.jpg"}) {
		t.Errorf("have --missing -z: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = have("--json", card+"/DCIM/A.JPG", root+"/docs/b.txt")
	got := haveJSON(t, r)
	if a := got[card+"/DCIM/A.JPG"]; r.code != 0 || a.State != "here" || len(a.Copies) != 1 ||
		a.Copies[0].Path != root+"/photos/a.jpg" || a.Key != annexKey("alpha", ".JPG") {
		t.Errorf("have --json: exit %d %+v\n%s", r.code, got, r.stderr)
	}
	if a := got[root+"/docs/b.txt"]; a.State != "here" || a.Key != annexKey("bravo", ".txt") {
		t.Errorf("have of a file in the root: %+v", a)
	}

	// Imported: everything is had.
	write(t, filepath.Join(root, "import/new1.jpg"), "new one")
	write(t, filepath.Join(root, "import/new2.jpg"), "new two")
	d.waitIdle()
	if r = have("--missing", card); r.code != 0 || r.stdout != "" {
		t.Errorf("have --missing after the import: exit %d, want 0 and nothing\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A file nobody may read: named, exit 5, the rest still answered.
	secret := filepath.Join(card, "secret.jpg")
	write(t, secret, "secret")
	if err := os.Chmod(secret, 0); err != nil {
		t.Fatal(err)
	}
	r = have("--json", card)
	got = haveJSON(t, r)
	if r.code != 5 || !strings.Contains(r.stderr, secret+": ") || !strings.Contains(r.stderr, "permission denied") ||
		got[secret].State != "error" || got[card+"/new2.jpg"].State != "here" {
		t.Errorf("have with an unreadable file: exit %d, want 5\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A disk indexed once and unplugged: its files answer from the index,
// marked absent with where the disk was mounted, and count as had; a
// file it never held is missing.
func TestHaveAbsentFileSystem(t *testing.T) {
	t.Parallel()
	usb, files, base, root, mnt := diskForRoot(t, 3)
	d := startOn(t, base, root)
	usb.MountAt(t, mnt)
	onUSB := make([]string, len(files))
	for i, p := range files {
		onUSB[i] = filepath.Join(mnt, strings.TrimPrefix(p, usb.Dir+"/"))
	}
	waitFor(t, d, 20*time.Second, "the mounted disk's files are indexed", func() bool {
		for _, p := range onUSB {
			if lookupJSON(t, d, p)["state"] != "current" {
				return false
			}
		}
		return true
	})
	if err := syscall.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, d, 20*time.Second, "the mount point is rescanned", func() bool {
		return strings.Count(d.log.String(), `dir=`+mnt) >= 2
	})
	d.waitIdle()

	card := filepath.Join(base, "card")
	for i := range files {
		writeAged(t, filepath.Join(card, filepath.Base(files[i])), 500+uint64(i), 8<<10) // fillTree's bytes
	}
	r := d.ctl("", "have", "--json", card)
	got := haveJSON(t, r)
	for i := range files {
		a := got[filepath.Join(card, filepath.Base(files[i]))]
		if a.State != "absent" || len(a.Copies) != 1 || a.Copies[0].Path != onUSB[i] ||
			a.Copies[0].Absent == nil || a.Copies[0].Absent.Point != mnt {
			t.Errorf("%s: %+v; want absent, copy %s on the disk last mounted at %s", files[i], a, onUSB[i], mnt)
		}
	}
	if r.code != 0 {
		t.Errorf("have of content on a disk away: exit %d, want 0\n%s%s", r.code, r.stdout, r.stderr)
	}
	write(t, filepath.Join(card, "never"), "never on the disk")
	r = d.ctl("", "have", card)
	if r.code != 1 || !strings.Contains(r.stdout, "missing:  "+card+"/never\n") ||
		!strings.Contains(r.stdout, "absent:   "+card+"/f000.bin -> "+onUSB[0]+" (not mounted: ") {
		t.Errorf("have: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// With a hub: content only another host holds is "elsewhere", naming the
// host and its path, and counts as had; this host's own files are
// "here", and content no host holds is missing.
func TestHaveThroughHub(t *testing.T) {
	t.Parallel()
	s := newHubSetup(t, "")
	s.nas.start()
	s.laptop.start()
	s.nas.caughtUp()
	s.laptop.caughtUp()
	card := filepath.Join(s.dir, "card")
	write(t, filepath.Join(card, "beach.jpg"), "the beach")           // the nas holds it
	write(t, filepath.Join(card, "only.txt"), "laptop only")          // the laptop only
	write(t, filepath.Join(card, "nowhere.txt"), "on no host at all") // nobody
	r := s.nas.ctl("have", "--json", card)
	got := haveJSON(t, r)
	if a := got[filepath.Join(card, "beach.jpg")]; a.State != "here" {
		t.Errorf("content the nas holds: %+v; want here", a)
	}
	if a := got[filepath.Join(card, "nowhere.txt")]; a.State != "missing" {
		t.Errorf("content no host holds: %+v; want missing", a)
	}
	if a := got[filepath.Join(card, "only.txt")]; a.State != "elsewhere" || r.code != 1 {
		t.Errorf("content the laptop holds: exit %d %+v; want elsewhere and exit 1 (one file missing)\n%s%s", r.code, a, r.stdout, r.stderr)
	}
	r = s.nas.ctl("have", filepath.Join(card, "only.txt"))
	if want := "elsewhere: " + card + "/only.txt -> laptop:" + s.laptop.path("only-laptop.txt") + "\n"; r.code != 0 || r.stdout != want {
		t.Errorf("have of content on the laptop: exit %d %q, want 0 %q\n%s", r.code, r.stdout, want, r.stderr)
	}
	if r = s.nas.ctl("have", "--no-hub", filepath.Join(card, "only.txt")); r.code != 1 {
		t.Errorf("have --no-hub of content on the laptop: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
}
