package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/internal/testutil"
)

// annexdBuild is the annexd binary the package's tests share, with the
// race detector.
var annexdBuild = testutil.Build{Pkg: "github.com/annexd/annexd/cmd/annexd", Flags: []string{"-race"}}

func TestMain(m *testing.M) {
	code := m.Run()
	annexdBuild.Remove()
	os.Exit(code)
}

// annexdBinary returns the shared annexd, built on first use. A test that
// moves or changes it links or copies it first (see linkBinary).
func annexdBinary(t *testing.T) string { return annexdBuild.Binary(t) }

// linkBinary puts the shared annexd at dst: a hard link, or a copy where
// dst is on another file system.
func linkBinary(t *testing.T, dst string) {
	t.Helper()
	src := annexdBinary(t)
	if os.Link(src, dst) == nil {
		return
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// daemonEnv is a private XDG layout for one test's daemons.
type daemonEnv struct {
	t      *testing.T
	bin    string
	root   string
	state  string
	rundir string
}

func newDaemonEnv(t *testing.T) *daemonEnv {
	base := t.TempDir()
	e := &daemonEnv{t: t, bin: annexdBinary(t), root: filepath.Join(base, "root"), state: filepath.Join(base, "state"), rundir: filepath.Join(base, "run")}
	for _, d := range []string{e.root, e.rundir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *daemonEnv) index() string  { return filepath.Join(e.state, "annexd", "index.db") }
func (e *daemonEnv) socket() string { return filepath.Join(e.rundir, "annexd", "annexd.sock") }

func (e *daemonEnv) command(args ...string) (*exec.Cmd, *testutil.Buffer) {
	cmd := exec.Command(e.bin, args...)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+e.state, "XDG_RUNTIME_DIR="+e.rundir,
		"XDG_CONFIG_HOME="+filepath.Join(e.state, "config"))
	out := new(testutil.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	return cmd, out
}

// start runs annexd on the root in the background and waits until its API
// answers.
func (e *daemonEnv) start(extra ...string) (*exec.Cmd, *testutil.Buffer) {
	e.t.Helper()
	args := append([]string{"--calibrate", "never", "--quiet-delay", "100ms", e.root}, extra...)
	cmd, out := e.command(args...)
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	c := api.Dial(e.socket())
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := c.Ping(context.Background()); err == nil {
			return cmd, out
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("annexd did not answer within 60 s:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitIdle waits for the daemon to be idle and returns its status.
func (e *daemonEnv) waitIdle() api.Status {
	e.t.Helper()
	c := api.Dial(e.socket())
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := c.Status(context.Background())
		if err == nil && st.Idle {
			return st
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("annexd not idle within 60 s: %+v %v", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *daemonEnv) lookup(p string) api.LookupResult {
	e.t.Helper()
	c := api.Dial(e.socket())
	defer c.Close()
	r, err := c.Lookup(context.Background(), []byte(p), true)
	if err != nil {
		e.t.Fatalf("lookup %s: %v", p, err)
	}
	return r
}

func writeOldFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
}

// wait waits for cmd to exit and returns its exit code.
func wait(t *testing.T, cmd *exec.Cmd, out *testutil.Buffer) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("annexd did not exit within 30 s:\n%s", out)
	}
	return cmd.ProcessState.ExitCode()
}

// A daemon resumes from its index: after SIGTERM, unchanged files are not
// hashed again and a file changed while it was down is. After SIGKILL
// alone, the same: the page cache kept every write the killed daemon
// hashed. After SIGKILL and the end of the root's mount (a disk pulled out
// and put back, as a power cut ends it), the records hashed within the
// data window before the last commit (here all of them) are hashed again
// too, since the bytes they name may be gone (store.Trusted).
func TestRunRestartResumesFromTheIndex(t *testing.T) {
	e := newDaemonEnv(t)
	disk := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: loopfs.MinSize[loopfs.Ext4]})
	e.root = disk.Path("root")
	if err := os.Mkdir(e.root, 0o700); err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range n {
		writeOldFile(t, filepath.Join(e.root, fmt.Sprintf("d%d/f%d.txt", i%9, i)), fmt.Sprint("content ", i))
	}
	cmd, out := e.start()
	st := e.waitIdle()
	if st.Scan.FilesHashed != n || st.Files != n {
		t.Fatalf("first run: %d hashed, %d files; want %d\n%s", st.Scan.FilesHashed, st.Files, n, out)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := wait(t, cmd, out); code != 0 {
		t.Fatalf("exit code %d after SIGTERM:\n%s", code, out)
	}

	restart := func(changed, content string, wantHashed int) (*exec.Cmd, *testutil.Buffer) {
		t.Helper()
		writeOldFile(t, changed, content)
		cmd, out := e.start()
		st := e.waitIdle()
		if st.Scan.FilesHashed != int64(wantHashed) || st.Files != n {
			t.Errorf("after restart: %d hashed, %d files; want %d and %d\n%s", st.Scan.FilesHashed, st.Files, wantHashed, n, out)
		}
		sum := sha256.Sum256([]byte(content))
		if r := e.lookup(changed); r.State != api.StateCurrent || !strings.Contains(r.Key.String(), fmt.Sprintf("%x", sum)) {
			t.Errorf("lookup of the changed file: %+v", r)
		}
		return cmd, out
	}
	killed := func(cmd *exec.Cmd) {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}
	cmd, _ = restart(filepath.Join(e.root, "d0/f0.txt"), "changed while the daemon was stopped", 1)
	killed(cmd)
	cmd, out = restart(filepath.Join(e.root, "d1/f1.txt"), "changed after the daemon was killed", 1)
	if !strings.Contains(out.String(), "stayed mounted") {
		t.Errorf("the restart after SIGKILL does not say why it trusts the records:\n%s", out)
	}
	killed(cmd)
	disk.Unmount(t)
	disk.Mount(t)
	cmd, out = restart(filepath.Join(e.root, "d2/f2.txt"), "changed after the daemon was killed and the disk unmounted", n)
	if !strings.Contains(out.String(), "re-verifying the records it hashed last") {
		t.Errorf("the restart after SIGKILL and an unmount does not say why it hashes again:\n%s", out)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := wait(t, cmd, out); code != 0 {
		t.Errorf("exit code %d after SIGTERM:\n%s", code, out)
	}
}

// SIGTERM flushes and exits 0; a second instance on the same index exits
// non-zero naming the index file.
func TestRunSecondInstanceAndSignal(t *testing.T) {
	e := newDaemonEnv(t)
	writeOldFile(t, filepath.Join(e.root, "a"), "a")
	cmd, out := e.start()
	e.waitIdle()

	other := t.TempDir()
	second, out2 := e.command("--calibrate", "never", "--socket", filepath.Join(other, "s.sock"), e.root)
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	if code := wait(t, second, out2); code != exitUsage || !strings.Contains(out2.String(), e.index()) ||
		!strings.Contains(out2.String(), "another annexd") {
		t.Errorf("second instance: exit %d, output:\n%s", code, out2)
	}

	// A ctime a tick old keeps the record from being racily clean, so the
	// restart re-hashes it only if the record was lost.
	p := filepath.Join(e.root, "written-before-term")
	writeOldFile(t, p, "x")
	time.Sleep(fsstat.FineGranularity + 10*time.Millisecond)
	if r := e.lookup(p); r.State != api.StateCurrent {
		t.Fatalf("lookup: %+v", r)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := wait(t, cmd, out); code != 0 {
		t.Fatalf("exit code %d after SIGTERM:\n%s", code, out)
	}
	// The record written by the lookup survived the shutdown.
	cmd, _ = e.start()
	st := e.waitIdle()
	if st.Scan.FilesHashed != 0 || st.Files != 2 {
		t.Errorf("after clean restart: %d hashed, %d files; want 0 and 2", st.Scan.FilesHashed, st.Files)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	wait(t, cmd, out)
}

func TestRunStartupErrors(t *testing.T) {
	e := newDaemonEnv(t)
	file := filepath.Join(e.root, "plain")
	writeOldFile(t, file, "x")
	badConf := filepath.Join(t.TempDir(), "annexd.toml")
	if err := os.WriteFile(badConf, []byte("[watch]\nquiet_dely = \"1s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badPattern := filepath.Join(t.TempDir(), "annexd.toml")
	if err := os.WriteFile(badPattern, []byte("[ignore]\npatterns = [\"*.tmp\", \"photos/[\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auditConf := func(body string) string {
		p := filepath.Join(t.TempDir(), "annexd.toml")
		if err := os.WriteFile(p, []byte("[audit]\n"+body+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	badWindow, badRate := auditConf(`windows = ["mon-fry 01:00-06:00"]`), auditConf(`max_rate = "fast"`)
	notIndex := filepath.Join(t.TempDir(), "index.db")
	if err := os.WriteFile(notIndex, []byte("not a bbolt file, but not empty either\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	openDir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(openDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(openDir, 0o755); err != nil {
		t.Fatal(err)
	}
	tcpConf := func(addr string) string {
		p := filepath.Join(t.TempDir(), "annexd.toml")
		body := fmt.Sprintf("[api]\ntcp = %q\ntoken = \"0123456789abcdef0123\"\n", addr)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{filepath.Join(e.root, "nope")}, []string{"nope", "does not exist"}},
		{[]string{file}, []string{file, "not a directory"}},
		{[]string{"--config", badConf, e.root}, []string{"watch.quiet_dely", badConf}},
		{[]string{"--backend", "SHA3", e.root}, []string{"backend", "SHA3"}},
		{[]string{"--config", badWindow, e.root}, []string{badWindow, "audit.windows", "mon-fry", `"mon-fri 01:00-06:00"`}},
		{[]string{"--config", badRate, e.root}, []string{badRate, "audit.max_rate", `"25 MB/s"`}},
		{nil, []string{"no directory to index"}},
		{[]string{"--config", badPattern, e.root}, []string{"photos/[", badPattern}},
		{[]string{"--ignore", "a[", e.root}, []string{"a[", "--ignore"}},
		{[]string{"--index", notIndex, e.root}, []string{notIndex, "not a bbolt database"}},
		{[]string{"--socket", filepath.Join(openDir, "s.sock"), e.root}, []string{openDir, "chmod 700"}},
		{[]string{"--config", tcpConf("192.0.2.1:7777"), e.root}, []string{"192.0.2.1:7777", "loopback"}},
		{[]string{"--config", tcpConf(taken.Addr().String()), e.root}, []string{taken.Addr().String(), "in use"}},
	}
	for _, c := range cases {
		cmd, out := e.command(c.args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if code := wait(t, cmd, out); code != exitUsage {
			t.Errorf("%v: exit %d, want %d\n%s", c.args, code, exitUsage, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: output lacks %q:\n%s", c.args, w, out)
			}
		}
	}
}

// `annexd ROOT` with nothing else configured puts the index and socket in
// the XDG places, and --exit-when-idle ends it after the first scan.
func TestRunDefaultsAndExitWhenIdle(t *testing.T) {
	e := newDaemonEnv(t)
	writeOldFile(t, filepath.Join(e.root, "x/y.tar.gz"), "y")
	cmd, out := e.command("--exit-when-idle", e.root)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if code := wait(t, cmd, out); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if _, err := os.Stat(e.index()); err != nil {
		t.Errorf("index not at the default place: %v", err)
	}
	if !strings.Contains(out.String(), e.socket()) {
		t.Errorf("log does not name the default socket %s:\n%s", e.socket(), out)
	}
}

// Flags override the config file, ROOT arguments replace its roots, and
// what neither sets keeps the file's value or the default.
func TestFlagsOverrideConfig(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "annexd.toml")
	body := "backend = \"SHA512\"\nroots = [\"/from/config\"]\n[watch]\nquiet_delay = \"3s\"\n[log]\nlevel = \"warn\"\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := &cobra.Command{Use: "annexd"}
	f := setupRun(cmd)
	args := []string{"--config", conf, "--backend", "BLAKE2B256E", "--quiet-delay", "250ms", "--ignore", "*.tmp", dir}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(cmd, cmd.Flags().Args(), f)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Backend != "BLAKE2B256E" || cfg.Watch.QuietDelay != 250*time.Millisecond || cfg.Log.Level != "warn" {
		t.Errorf("config %+v", cfg)
	}
	if len(cfg.Roots) != 1 || cfg.Roots[0] != dir || len(cfg.Ignore.Patterns) != 1 || cfg.File != conf {
		t.Errorf("roots %q ignore %q file %q", cfg.Roots, cfg.Ignore.Patterns, cfg.File)
	}
}
