package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An idle daemon sleeps: once its first scan is done and logged, with
// nothing changing, it makes next to no system calls. It polled files in
// /proc several times a second (the watch limit at each look at its
// progress, the process's I/O counters for the thread count) and woke on
// timers; bench/idle.sh has the figures. The daemon runs in a mount
// namespace of its own, so that others mounting file systems on the
// machine do not wake it (it follows the mount table).
func TestIdleDaemonSleeps(t *testing.T) {
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatal("strace is not installed: the idle test counts the daemon's system calls with it (scripts/test.sh installs it)")
	}
	base, root := newRoot(t, func(root string) {
		for i := range 200 {
			write(t, filepath.Join(root, fmt.Sprintf("d%d", i%10), fmt.Sprintf("f%d", i)), strconv.Itoa(i))
		}
	})
	d := spawn(t, annexdRun{base: base, roots: []string{root}, wrap: inOwnMounts(filepath.Dir(base), "")})
	d.waitIdle()
	if !d.waitLog("msg=idle") { // the progress log's last look before it sleeps
		t.Fatalf("no idle line in the log\n%s", d.log)
	}
	time.Sleep(time.Second)
	out := filepath.Join(base, "strace")
	cmd := exec.Command("strace", "-c", "-f", "-q", "-o", out, "-p", strconv.Itoa(d.cmd.Process.Pid))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	calls := -1
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[len(f)-1] == "total" {
			calls, _ = strconv.Atoi(f[3])
		}
	}
	// A forced collection (every two minutes) or a scavenge may fall in
	// the window; the polls made thousands.
	if calls < 0 || calls > 100 {
		t.Fatalf("an idle daemon made %d system calls in 5 s; want at most 100\n%s", calls, b)
	}
}
