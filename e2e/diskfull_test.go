package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory under base,
// unmounted when the test ends.
func mountTmpfs(t *testing.T, base string, size int64) string {
	t.Helper()
	needRoot(t, "mount a tmpfs")
	dir := filepath.Join(base, "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillUp writes file until its file system has no room left.
func fillUp(t *testing.T, file string) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// The index on a file system that fills up: the writes it refuses are
// held and counted as a backlog that status, status --wait and the
// metrics show (the daemon is not idle meanwhile), the log says so once,
// and once there is space again every file is recorded without a restart.
func TestIndexFileSystemFull(t *testing.T) {
	t.Parallel()
	const n = 12000
	base := newBase(t)
	small := mountTmpfs(t, base, 2<<20)
	root := filepath.Join(base, "root")
	for i := range n {
		write(t, filepath.Join(root, fmt.Sprintf("d%03d", i%120), fmt.Sprintf("file-%05d.txt", i)), fmt.Sprintf("content %d", i))
	}
	d := spawn(t, annexdRun{base: base, roots: []string{root}, extra: []string{"--index", filepath.Join(small, "index.db")}})

	st := waitStatus(t, d, 2*time.Minute, "a backlog", func(st api.Status) bool { return st.Backlog.Changes > 0 })
	if st.Idle || st.Backlog.Since.IsZero() || !strings.Contains(st.Backlog.Reason, "no space") {
		t.Errorf("status with a backlog: idle %v, backlog %+v", st.Idle, st.Backlog)
	}
	// At the edge of full a smaller commit can still find room (the
	// writer splits a refused group, and bbolt reuses freed pages), so
	// the backlog comes and goes; fill what is left so that it stays.
	fillUp(t, filepath.Join(small, "filler"))
	showsBacklog := func() (string, bool) {
		waitStatus(t, d, time.Minute, "a backlog", func(st api.Status) bool { return st.Backlog.Changes > 0 })
		r := d.ctl("", "status", "--wait", "--timeout", "2s")
		if r.code != 1 || !strings.Contains(r.stdout, "backlog") {
			return fmt.Sprintf("exit %d\n%s%s", r.code, r.stdout, r.stderr), false
		}
		c := api.Dial(d.socket)
		defer c.Close()
		m, err := c.Metrics(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if v := regexp.MustCompile(`(?m)^annexd_index_backlog_changes (\d+)$`).FindStringSubmatch(string(m)); v == nil || v[1] == "0" {
			return fmt.Sprintf("annexd_index_backlog_changes: %v", v), false
		}
		return "", true
	}
	// The freed pages run out after a few commits; then the backlog
	// stays until there is room.
	var last string
	ok := false
	for range 10 {
		if last, ok = showsBacklog(); ok {
			break
		}
	}
	if !ok {
		t.Errorf("status --wait and the metrics on a full index file system do not show the backlog (want exit 1 and a count): %s", last)
	}

	// Space comes back.
	if err := syscall.Mount("tmpfs", small, "tmpfs", syscall.MS_REMOUNT, "size=256m"); err != nil {
		t.Fatal(err)
	}
	d.waitIdle()
	st = statusJSON(t, d)
	if st.Files != n || st.Backlog.Changes != 0 {
		t.Errorf("after space came back: %d files, backlog %+v; want %d files and none", st.Files, st.Backlog, n)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		f := filepath.Join(root, fmt.Sprintf("d%03d", i%120), fmt.Sprintf("file-%05d.txt", i))
		if r := d.ctl("", "lookup", f); r.code != 0 || strings.TrimSpace(r.stdout) != calckey(t, f) {
			t.Errorf("lookup %s: exit %d %q %q", f, r.code, r.stdout, r.stderr)
		}
	}
	log := d.log.String()
	if k := len(regexp.MustCompile(`(?m)^time=.*(no space|ENOSPC).*$`).FindAllString(log, -1)); k > 2 {
		t.Errorf("%d log records about the full file system, want one or two:\n%s", k, log)
	}
	if !strings.Contains(log, "index writes resumed") {
		t.Errorf("the log does not say the writes resumed:\n%s", log)
	}
}
