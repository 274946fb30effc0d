package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStartThenStatusWait runs the README's two lines, `annexd DIR &` and
// `annexctl status --wait`, with nothing in between: the wait covers the
// daemon's start (its socket appearing, the first calibration) too.
func TestStartThenStatusWait(t *testing.T) {
	t.Parallel()
	d := launch(t, func(root string) {
		for _, name := range []string{"a", "b/c", "b/d.txt"} {
			write(t, filepath.Join(root, name), name)
		}
	}, nil) // a fresh index calibrates first, as at a user's first start
	r := d.ctl("", "status", "--wait", "--timeout", "2m")
	if r.code != 0 || !strings.Contains(r.stdout, "state:   idle") || !strings.Contains(r.stdout, "3 files") {
		t.Fatalf("status --wait right after the start: exit %d\n%s%s\ndaemon log:\n%s", r.code, r.stdout, r.stderr, d.log)
	}
	if r := d.ctl("", "lookup", filepath.Join(d.root, "b/d.txt")); r.code != 0 ||
		strings.TrimSpace(r.stdout) != calckey(t, filepath.Join(d.root, "b/d.txt")) {
		t.Errorf("lookup after the wait: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// TestStatusWaitForNoDaemon: with nothing coming up, status --wait gives
// up after its start-up wait and says annexd is not running.
func TestStatusWaitForNoDaemon(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := append(os.Environ(), "ANNEXD_SOCKET="+filepath.Join(dir, "annexd.sock"))
	began := time.Now()
	r := runCtl(t, env, "", "", "status", "--wait", "--timeout", "1s")
	if r.code != 3 || !strings.Contains(r.stderr, "annexd is not running") {
		t.Errorf("exit %d, stderr %q; want exit 3, not running", r.code, r.stderr)
	}
	if took := time.Since(began); took < time.Second {
		t.Errorf("gave up after %v, before its --timeout of 1s", took)
	}
}

// notifySocket listens where systemd would for a Type=notify service and
// returns its path and the datagrams that arrive.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "e2e-notify")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	msgs := make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	return path, msgs
}

// nextNotify waits up to two minutes for a datagram holding line.
func nextNotify(t *testing.T, msgs <-chan string, line string, seen *[]string) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("notify socket closed before %q; got %q", line, *seen)
			}
			*seen = append(*seen, m)
			for _, l := range strings.Split(m, "\n") {
				if l == line || (strings.HasSuffix(line, "=") && strings.HasPrefix(l, line)) {
					return
				}
			}
		case <-deadline:
			t.Fatalf("no %q from annexd; got %q", line, *seen)
		}
	}
}

// TestSystemdNotify: under a Type=notify unit annexd says READY=1 once it
// serves the index, keeps a STATUS= line, and says STOPPING=1 on SIGTERM.
func TestSystemdNotify(t *testing.T) {
	sock, msgs := notifySocket(t)
	t.Setenv("NOTIFY_SOCKET", sock)
	d := launch(t, func(root string) { write(t, filepath.Join(root, "f.txt"), "f") }, nil)
	var seen []string
	nextNotify(t, msgs, "STATUS=", &seen) // the start, before READY
	nextNotify(t, msgs, "READY=1", &seen)
	// READY means serving: a lookup is answered now, not refused as starting.
	f := filepath.Join(d.root, "f.txt")
	if r := d.ctl("", "lookup", "--wait", "--timeout", "1m", f); r.code != 0 || strings.TrimSpace(r.stdout) != calckey(t, f) {
		t.Errorf("lookup after READY=1: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(strings.Join(seen, "\n"), "STATUS=") {
		t.Errorf("no STATUS= line: %q", seen)
	}
	d.exited = true
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	nextNotify(t, msgs, "STOPPING=1", &seen)
	if err := <-d.done; err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, d.log)
	}
}
