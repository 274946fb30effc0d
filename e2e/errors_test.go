package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A bad value given by a flag is named by the flag, not by a config file
// that holds no such key; one given by the file names the key and the
// file. annexd exits 2 either way.
func TestBadValueNamesItsSource(t *testing.T) {
	base, root := newRoot(t, nil)
	conf := filepath.Join(base, "config", "annexd", "annexd.toml")
	write(t, conf, "[log]\nformat = \"text\"\n")
	for _, c := range []struct {
		extra      []string
		want, not  string
		configFile string
	}{
		{[]string{"--backend", "SHA257E"}, `--backend "SHA257E": want a git-annex backend`, conf, ""},
		{[]string{"--log-level", "loud"}, `--log-level "loud": want "debug"`, conf, ""},
		{[]string{"--config", "/dev/null", "--backend", "SHA257E"}, `--backend "SHA257E"`, "/dev/null", ""},
	} {
		d := spawn(t, annexdRun{base: base, roots: []string{root}, extra: c.extra})
		code := d.exit(time.Minute)
		log := d.log.String()
		if code != 2 || !strings.Contains(log, c.want) || strings.Contains(log, " in "+c.not) {
			t.Errorf("annexd %v: exit %d, %q; want exit 2 naming the flag, not %s", c.extra, code, log, c.not)
		}
	}
	write(t, conf, "backend = \"SHA257E\"\n")
	d := spawn(t, annexdRun{base: base, roots: []string{root}})
	if code, log := d.exit(time.Minute), d.log.String(); code != 2 || !strings.Contains(log, `backend = "SHA257E" in `+conf) {
		t.Errorf("a bad backend in the file: exit %d, %q; want exit 2 naming the key and the file", code, log)
	}
}

// An index annexd cannot write (on a read-only file system) is a start
// the user fixes in --index or the file system: exit 2, as README's table
// says, with the fix in the message.
func TestReadOnlyIndexExits2(t *testing.T) {
	base, root := newRoot(t, func(root string) { write(t, filepath.Join(root, "a"), "a") })
	mnt := filepath.Join(base, "ro")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	index := filepath.Join(mnt, "index.db")
	first := spawn(t, annexdRun{base: base, roots: []string{root}, extra: []string{"--index", index, "--exit-when-idle"}})
	if code := first.exit(time.Minute); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, first.log)
	}
	if out, err := exec.Command("mount", "-o", "remount,ro", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v %s", err, out)
	}
	d := spawn(t, annexdRun{base: base, roots: []string{root}, extra: []string{"--index", index}})
	code := d.exit(time.Minute)
	if log := d.log.String(); code != 2 || !strings.Contains(log, "read-only file system") || !strings.Contains(log, "choose another --index") {
		t.Errorf("a read-only index: exit %d, %q; want exit 2 and the fix", code, log)
	}
}
