package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/testutil"
)

// annexdRun describes an annexd run in a base directory: the index at
// base/index.db and the socket at base/run/annexd.sock, as startOn has them.
type annexdRun struct {
	base  string
	roots []string
	extra []string            // flags after the common ones
	exe   string              // the annexd binary ("": the one built for the tests)
	wrap  []string            // a program (and its arguments) that runs annexd, such as prlimit
	cred  *syscall.Credential // run as this user (nil: as the test)
	// calibrate leaves out --calibrate never, so annexd calibrates as it
	// does by default.
	calibrate bool
	sub       string                  // a subcommand ("repair"), or "" for the daemon
	env       func([]string) []string // adjusts the environment, if set
}

// args returns the command line: the subcommand, the flags the e2e tests
// always give, extra, then the roots.
func (l annexdRun) args() []string {
	var a []string
	if l.sub != "" {
		a = append(a, l.sub)
	}
	a = append(a, "--socket", filepath.Join(l.base, "run", "annexd.sock"), "--index", filepath.Join(l.base, "index.db"))
	if !l.calibrate {
		a = append(a, "--calibrate", "never")
	}
	a = append(a, "--quiet-delay", "200ms")
	a = append(a, l.extra...)
	return append(a, l.roots...)
}

// spawn starts annexd as l says and returns without waiting for it.
func spawn(t testing.TB, l annexdRun) *daemon {
	t.Helper()
	d := &daemon{t: t, root: l.roots[0], socket: filepath.Join(l.base, "run", "annexd.sock"), log: new(testutil.Buffer),
		done: make(chan error, 1)}
	d.env = append(os.Environ(),
		"XDG_CONFIG_HOME="+filepath.Join(l.base, "config"),
		"XDG_STATE_HOME="+filepath.Join(l.base, "state"),
		"XDG_RUNTIME_DIR="+filepath.Join(l.base, "xdgrun"),
		"ANNEXD_SOCKET="+d.socket)
	if l.env != nil {
		d.env = l.env(d.env)
	}
	exe := l.exe
	if exe == "" {
		exe = bin.annexd
	}
	argv := append(append(slices.Clone(l.wrap), exe), l.args()...)
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Env = d.env
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if l.cred != nil {
		d.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: l.cred}
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(d.stop)
	return d
}

// exit waits up to limit for the process to end by itself and returns its
// exit status; the test fails if it is still running then.
func (d *daemon) exit(limit time.Duration) int {
	d.t.Helper()
	select {
	case err := <-d.done:
		d.exited = true
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			d.t.Fatalf("annexd: %v\n%s", err, d.log)
		}
		return 0
	case <-time.After(limit):
		d.t.Fatalf("annexd still running after %v\n%s", limit, d.log)
		return -1
	}
}

// newBase makes a temporary base directory (symlinks resolved), removed
// when the test ends.
func newBase(t testing.TB) string {
	t.Helper()
	base, err := os.MkdirTemp("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	base, _ = filepath.EvalSymlinks(base)
	t.Cleanup(func() { os.RemoveAll(base) })
	return base
}

// inOwnMounts is a wrap that runs annexd in a mount namespace of its own,
// after setup (shell commands, "" for none). The namespace starts as a
// copy of every mount of the machine, those of the tests running beside
// this one included (loop images, tmpfs): copied, they would stay mounted
// in it after their tests unmount them, and a power cut's remount would
// find the old, shut-down file system. So the copies below the temporary
// directory are detached in the namespace first, but for those below
// keep, the test's own (its t.TempDir's parent; "" for none).
func inOwnMounts(keep, setup string) []string {
	tmp := strings.TrimSuffix(os.TempDir(), "/") + "/"
	if keep == "" {
		keep = "//" // no mount point starts with it
	}
	detach := `awk -v t='` + tmp + `' -v k='` + strings.TrimSuffix(keep, "/") + `/' ` +
		`'index($5, t) == 1 && index($5, k) != 1 && $5"/" != k { print $5 }' /proc/self/mountinfo | sort -r |
		while read -r m; do umount -l "$m" 2>/dev/null || true; done`
	if setup != "" {
		detach += " && " + setup
	}
	return []string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", detach + ` && exec "$@"`, "sh"}
}
