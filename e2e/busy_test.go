package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
)

// fullSocket listens on a unix socket whose backlog is full and never
// accepts, as a daemon swamped by other clients looks from outside.
func fullSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "e2e-full")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "annexd.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		c, err := net.Dial("unix", sock)
		if errors.Is(err, syscall.EAGAIN) {
			return sock
		}
		if err != nil || i > 100 {
			t.Fatalf("filling the backlog: %d connections, then %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
	}
}

// TestBacklogFullIsBusy: when the daemon's listen queue is full (EAGAIN
// at connect), annexctl retries until its timeout, then says the daemon
// is busy, never that it is not running.
func TestBacklogFullIsBusy(t *testing.T) {
	t.Parallel()
	sock := fullSocket(t)
	env := append(os.Environ(), "ANNEXD_SOCKET="+sock)
	for _, args := range [][]string{
		{"lookup", "--timeout", "2s", "/x"},
		{"status", "--wait", "--timeout", "2s"},
	} {
		began := time.Now()
		r := runCtl(t, env, "", "", args...)
		took := time.Since(began)
		if r.code != 3 || !strings.Contains(r.stderr, "busy") || strings.Contains(r.stderr, "not running") ||
			!strings.Contains(r.stderr, sock) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 3 and one line saying annexd is busy", args, r.code, r.stderr)
		}
		if took < 2*time.Second {
			t.Errorf("%v: gave up after %v, before its --timeout of 2s", args, took)
		}
	}
}

// TestKilledDuringStatusWait: a daemon killed while status --wait waits
// for it is reported as having closed the connection, not as a bad
// response.
func TestKilledDuringStatusWait(t *testing.T) {
	t.Parallel()
	// With an hour's quiet delay, a file written after the first scan
	// stays pending: the wait goes on until the kill.
	d := launch(t, nil, nil, "--calibrate", "never", "--quiet-delay", "1h")
	d.waitIdle()
	write(t, filepath.Join(d.root, "pending"), "not settled for an hour")
	// The connections of the commands before have gone once only the
	// metrics client's own is left; then the next one is the wait's.
	c := api.Dial(d.socket)
	defer c.Close()
	waitConnections(t, c, "only the metrics client's connection", func(n int) bool { return n == 1 })
	wait := startCtl(t, d, "status", "--wait")
	waitConnections(t, c, "the wait's connection", func(n int) bool { return n >= 2 })
	d.exited = true
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.done
	r := wait()
	if r.code != 3 || !strings.Contains(r.stderr, "annexd closed the connection") ||
		strings.Contains(r.stderr, "bad response") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("status --wait when annexd is killed: exit %d, stderr %q", r.code, r.stderr)
	}
}

// A daemon that answers nothing before status --wait's --timeout (held
// up on a busy machine; here stopped with SIGSTOP) is shown as it is once
// it answers, never as a status of zeros that it never gave.
func TestStatusWaitTimeoutShowsTheDaemonsStatus(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(root string) { write(t, filepath.Join(root, "f.txt"), "some content") })
	pid := d.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := time.AfterFunc(2*time.Second, func() { syscall.Kill(pid, syscall.SIGCONT) })
	defer func() {
		resumed.Stop()
		syscall.Kill(pid, syscall.SIGCONT)
	}()
	// Busy: a status --wait can only time out while the daemon is stopped.
	r := d.ctl("", "status", "--wait", "--timeout", "1s")
	if r.code != 1 || !strings.Contains(r.stderr, "not idle after 1s") {
		t.Errorf("status --wait --timeout 1s of a stopped daemon: exit %d, want 1 and 'not idle'\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "pid 0") || !strings.Contains(r.stdout, fmt.Sprintf("pid %d", pid)) {
		t.Errorf("status --wait that timed out printed a status the daemon never gave:\n%s", r.stdout)
	}
}
