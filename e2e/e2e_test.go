// Package e2e runs the real annexd and drives the real annexctl binary
// against it, on temporary trees.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/testutil"
)

// bin holds the binaries built once for all tests.
var bin struct {
	dir              string
	annexd, annexctl string
	gitRepo          string // git annex calckey wants to run inside a repository
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "annexd-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin.dir = dir
	bin.annexd = filepath.Join(dir, "annexd")
	bin.annexctl = filepath.Join(dir, "annexctl")
	for _, b := range []struct{ out, pkg string }{{bin.annexd, "./cmd/annexd"}, {bin.annexctl, "./cmd/annexctl"}} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: build %s: %v\n%s", b.pkg, err, out)
			return 1
		}
	}
	if out, err := exec.Command("git", "annex", "version").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: these tests compare keys with git-annex's own: %v\n%s(install it: apt-get install git-annex)\n", err, out)
		return 1
	}
	bin.gitRepo = filepath.Join(dir, "repo")
	cmd := exec.Command("git", "init", "-q", bin.gitRepo)
	cmd.Env = gitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: git init: %v\n%s", err, out)
		return 1
	}
	defer annexBatch.stop()
	return m.Run()
}

// gitEnv is the environment for git and git-annex: no system or user
// configuration, so that a machine's annex.backend or extension settings
// cannot change the keys they compute.
func gitEnv() []string {
	return append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
}

// daemon is a running annexd.
type daemon struct {
	t      testing.TB
	root   string // watched root (symlinks resolved)
	socket string
	env    []string
	cmd    *exec.Cmd
	log    *testutil.Buffer
	done   chan error
	exited bool
	// samples counts sampleStatus's calls.
	samples int
}

// startDaemon runs annexd on a new temporary root and waits until its
// first scan is done. setup, if not nil, fills the root first.
func startDaemon(t testing.TB, setup func(root string)) *daemon {
	t.Helper()
	base, root := newRoot(t, setup)
	d := spawn(t, annexdRun{base: base, roots: []string{root}})
	d.waitIdle()
	return d
}

// newRoot makes a base directory (newBase) with an empty root in it, and
// fills the root with setup when it is not nil.
func newRoot(t testing.TB, setup func(root string)) (base, root string) {
	t.Helper()
	base = newBase(t)
	root = filepath.Join(base, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(root)
	}
	return base, root
}

// waitIdle waits until annexctl status --wait succeeds: up to two minutes,
// asked again while the daemon is not up yet (exit 3) or its wait ran out
// (exit 1).
func (d *daemon) waitIdle() {
	d.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		left := time.Until(deadline).Round(time.Second)
		r := d.ctl("", "status", "--wait", "--timeout", max(left, time.Second).String())
		if r.code == 0 {
			return
		}
		select {
		case err := <-d.done:
			d.exited = true
			d.t.Fatalf("annexd exited: %v\n%s", err, d.log)
		default:
		}
		if (r.code != 1 && r.code != 3) || time.Now().After(deadline) {
			d.t.Fatalf("status --wait: exit %d\n%s\n%s\ndaemon log:\n%s", r.code, r.stdout, r.stderr, d.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLog waits up to 30 s until the daemon's log holds text.
func (d *daemon) waitLog(text string) bool {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(d.log.String(), text) {
			return true
		}
	}
	return false
}

// stop sends SIGTERM and expects a clean exit.
func (d *daemon) stop() {
	if d.exited {
		return
	}
	d.exited = true
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		if err != nil {
			d.t.Errorf("annexd exit after SIGTERM: %v\n%s", err, d.log)
		}
	case <-time.After(20 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
		d.t.Errorf("annexd did not exit within 20s of SIGTERM\n%s", d.log)
	}
}

// needRoot fails the test, loudly rather than skipped, unless it runs as
// root, which it needs to do what: CI runs the suite as root.
func needRoot(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root to %s; run the tests as root, as CI does", what)
	}
}

type result struct {
	code           int
	stdout, stderr string
}

// ctl runs annexctl with stdin in the daemon's environment.
func (d *daemon) ctl(stdin string, args ...string) result {
	return d.ctlIn("", stdin, args...)
}

// ctlIn runs annexctl in directory dir ("" for the test's).
func (d *daemon) ctlIn(dir, stdin string, args ...string) result {
	d.t.Helper()
	return runCtl(d.t, d.env, dir, stdin, args...)
}

// ctlTimeout bounds one annexctl run, so that a hang fails the test with
// its output instead of ending the whole run at go test's timeout.
const ctlTimeout = 3 * time.Minute

func runCtl(t testing.TB, env []string, dir, stdin string, args ...string) result {
	t.Helper()
	return runCmd(t, bin.annexctl, args, func(cmd *exec.Cmd) {
		cmd.Env, cmd.Dir = env, dir
		cmd.Stdin = strings.NewReader(stdin)
	})
}

// runCmd runs prog with args, after set (if not nil) adjusts the command,
// and returns its output and exit status. The test fails when prog cannot
// run or takes longer than ctlTimeout.
func runCmd(t testing.TB, prog string, args []string, set func(*exec.Cmd)) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ctlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	if set != nil {
		set(cmd)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s %v did not finish within %v\n%s%s", filepath.Base(prog), args, ctlTimeout, r.stdout, r.stderr)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %v: %v", filepath.Base(prog), args, err)
	}
	return r
}

// calckey is git-annex's own answer for path. One `git annex calckey
// --batch` answers all the tests, started at the first call: a start of
// git-annex for each key cost more CPU than the key. A path with a newline
// cannot go through the batch, and gets a git-annex of its own.
func calckey(t testing.TB, path string) string {
	t.Helper()
	if strings.Contains(path, "\n") {
		cmd := exec.Command("git", "annex", "calckey", path)
		cmd.Dir, cmd.Env = bin.gitRepo, gitEnv()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git annex calckey %q: %v", path, err)
		}
		return strings.TrimSpace(string(out))
	}
	key, err := annexBatch.calckey(path)
	if err != nil {
		t.Fatalf("git annex calckey --batch %q: %v", path, err)
	}
	return key
}

// annexBatch is the one `git annex calckey --batch` of the test binary.
var annexBatch calckeyBatch

type calckeyBatch struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	in  io.WriteCloser
	out *os.File
	r   *bufio.Reader
	err error // why the batch cannot be used, once it failed
}

// calckey asks the batch for path's key: an empty answer (git-annex could
// not read the file) and no answer within ctlTimeout are errors.
func (b *calckeyBatch) calckey(path string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil && b.err == nil {
		b.err = b.start()
	}
	if b.err != nil {
		return "", b.err
	}
	if _, err := fmt.Fprintln(b.in, path); err != nil {
		b.err = err
		return "", err
	}
	b.out.SetReadDeadline(time.Now().Add(ctlTimeout))
	line, err := b.r.ReadString('\n')
	if err != nil {
		b.err = fmt.Errorf("no answer: %w", err)
		return "", b.err
	}
	if key := strings.TrimSpace(line); key != "" {
		return key, nil
	}
	return "", errors.New("no key (git-annex cannot read the file)")
}

func (b *calckeyBatch) start() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer w.Close()
	b.cmd = exec.Command("git", "annex", "calckey", "--batch")
	b.cmd.Dir, b.cmd.Env, b.cmd.Stdout, b.cmd.Stderr = bin.gitRepo, gitEnv(), w, os.Stderr
	if b.in, err = b.cmd.StdinPipe(); err != nil {
		r.Close()
		return err
	}
	if err := b.cmd.Start(); err != nil {
		r.Close()
		return err
	}
	b.out, b.r = r, bufio.NewReader(r)
	return nil
}

// stop ends the batch, if it was started.
func (b *calckeyBatch) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		b.in.Close()
		b.cmd.Wait()
		b.out.Close()
	}
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLookupAfterWrite(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(root string) { write(t, filepath.Join(root, "old.txt"), "old") })
	f := filepath.Join(d.root, "old.txt")
	if r := d.ctl("", "lookup", f); r.code != 0 || strings.TrimSpace(r.stdout) != calckey(t, f) {
		t.Fatalf("scanned file: exit %d %q %q; want %s", r.code, r.stdout, r.stderr, calckey(t, f))
	}
	// Without --wait, a rewritten file is either hashed on demand or
	// reported pending: never answered with its old key.
	old := calckey(t, f)
	write(t, f, "rewritten")
	r := d.ctl("", "lookup", f)
	if strings.Contains(r.stdout, old) || (r.code == 0) != (strings.TrimSpace(r.stdout) == calckey(t, f)) {
		t.Errorf("right after a rewrite: exit %d %q %q (old key %s)", r.code, r.stdout, r.stderr, old)
	}
	for i, content := range []string{"first version", "second, longer version", "3"} {
		g := filepath.Join(d.root, "new", "file.tar.gz")
		write(t, g, content)
		r := d.ctl("", "lookup", "--wait", g)
		if want := calckey(t, g); r.code != 0 || strings.TrimSpace(r.stdout) != want {
			t.Errorf("write %d: exit %d %q %q; want %s", i, r.code, r.stdout, r.stderr, want)
		}
	}
}

func TestLookupErrors(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(root string) { write(t, filepath.Join(root, "a"), "a") })
	r := d.ctl("", "lookup", filepath.Join(d.root, "nope"), filepath.Join(d.root, "a"))
	if r.code != 1 || !strings.Contains(r.stderr, "nope") || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("missing file: exit %d, stderr %q", r.code, r.stderr)
	}
	if strings.TrimSpace(r.stdout) != calckey(t, filepath.Join(d.root, "a")) {
		t.Errorf("the good file's key is missing: %q", r.stdout)
	}
	r = d.ctl("", "lookup", "/etc/hostname")
	if r.code != 1 || !strings.Contains(r.stderr, "not under any directory annexd watches") {
		t.Errorf("outside roots: exit %d, stderr %q", r.code, r.stderr)
	}
	r = d.ctl("", "lookup", d.root)
	if r.code != 1 || !strings.Contains(r.stderr, "not a regular file") {
		t.Errorf("directory: exit %d, stderr %q", r.code, r.stderr)
	}
	if r = d.ctl("", "lookup"); r.code != 2 {
		t.Errorf("no arguments: exit %d", r.code)
	}
}

func TestNonUTF8Names(t *testing.T) {
	t.Parallel()
	name := "caf\xe9 \xff.txt"
	d := startDaemon(t, func(root string) { write(t, filepath.Join(root, name), "latin-1 name") })
	f := filepath.Join(d.root, name)
	want := calckey(t, f)
	if r := d.ctl("", "lookup", f); r.code != 0 || strings.TrimSpace(r.stdout) != want {
		t.Errorf("lookup: exit %d %q %q; want %s", r.code, r.stdout, r.stderr, want)
	}
	r := d.ctl(f+"\x00", "lookup", "--batch", "-z", "--json")
	var obj struct {
		Path, PathB64, Key, State string
	}
	if err := json.Unmarshal([]byte(r.stdout), &struct {
		Path    *string `json:"path"`
		PathB64 *string `json:"path_b64"`
		Key     *string `json:"key"`
		State   *string `json:"state"`
	}{&obj.Path, &obj.PathB64, &obj.Key, &obj.State}); err != nil {
		t.Fatalf("--json output %q: %v", r.stdout, err)
	}
	raw, _ := base64.StdEncoding.DecodeString(obj.PathB64)
	if string(raw) != f || obj.Key != want || obj.State != "current" {
		t.Errorf("--json: %+v; path_b64 decodes to %q, want %q", obj, raw, f)
	}
	r = d.ctl("", "whereis", want)
	if r.code != 0 || r.stdout != f+"\n" {
		t.Errorf("whereis: exit %d stdout %q, want the exact bytes %q", r.code, r.stdout, f)
	}
}

func TestRelativeAndSymlinkedPaths(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(root string) {
		write(t, filepath.Join(root, "x", "f.txt"), "f")
		write(t, filepath.Join(root, "y", "g.txt"), "g")
	})
	want := calckey(t, filepath.Join(d.root, "x", "f.txt"))
	x := filepath.Join(d.root, "x")
	for _, arg := range []string{"f.txt", "./f.txt", "../x/f.txt", "../y/../x/f.txt"} {
		if r := d.ctlIn(x, "", "lookup", arg); r.code != 0 || strings.TrimSpace(r.stdout) != want {
			t.Errorf("lookup %s in %s: exit %d %q %q", arg, x, r.code, r.stdout, r.stderr)
		}
	}
	// A symlink outside the root pointing into it: the directory part is
	// resolved when the plain path is outside the roots.
	link := filepath.Join(filepath.Dir(d.root), "link")
	if err := os.Symlink(x, link); err != nil {
		t.Fatal(err)
	}
	if r := d.ctl("", "lookup", filepath.Join(link, "f.txt")); r.code != 0 || strings.TrimSpace(r.stdout) != want {
		t.Errorf("through a symlinked directory: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	env := append(append([]string{}, d.env...), "PWD="+link)
	if r := runCtl(t, env, link, "", "lookup", "f.txt"); r.code != 0 || strings.TrimSpace(r.stdout) != want {
		t.Errorf("relative in a symlinked cwd: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func TestBatch(t *testing.T) {
	t.Parallel()
	const n = 300
	d := startDaemon(t, func(root string) {
		for i := range n {
			write(t, filepath.Join(root, fmt.Sprintf("d%d", i%7), fmt.Sprintf("%d.bin", i)), fmt.Sprint(i%50))
		}
	})
	var in, want strings.Builder
	for i := range n {
		p := filepath.Join(d.root, fmt.Sprintf("d%d", i%7), fmt.Sprintf("%d.bin", i))
		fmt.Fprintln(&in, p)
		fmt.Fprintln(&want, calckey(t, p)) // every key: the batch git-annex makes it cheap
		if i%100 == 0 {
			fmt.Fprintln(&in, filepath.Join(d.root, "missing"))
			fmt.Fprintln(&in, "/etc/hostname")
			fmt.Fprintln(&want)
			fmt.Fprintln(&want)
		}
	}
	r := d.ctl(in.String(), "lookup", "--batch")
	got := strings.Split(r.stdout, "\n")
	exp := strings.Split(want.String(), "\n")
	// Every path is answered; exit 1 says that some had no key.
	if r.code != 1 || len(got) != len(exp) {
		t.Fatalf("exit %d, %d lines, want %d\n%s", r.code, len(got), len(exp), r.stderr)
	}
	for i := range exp {
		if got[i] != exp[i] {
			t.Errorf("line %d: %q, want %q", i, got[i], exp[i])
		}
	}
}

func TestWhereisDupsStatus(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(root string) {
		write(t, filepath.Join(root, "a.JPG"), "same content")
		write(t, filepath.Join(root, "sub", "b.jpg"), "same content")
		write(t, filepath.Join(root, "c"), "unique")
	})
	a, b := filepath.Join(d.root, "a.JPG"), filepath.Join(d.root, "sub", "b.jpg")
	r := d.ctl("", "whereis", b)
	if r.code != 0 || r.stdout != a+"\n"+b+"\n" {
		t.Errorf("whereis FILE: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r = d.ctl("", "whereis", calckey(t, a)); r.code != 0 || r.stdout != a+"\n"+b+"\n" {
		t.Errorf("whereis KEY: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = d.ctl("", "dups", "--json")
	var g struct {
		Count     int `json:"count"`
		Size      int `json:"size"`
		Duplicate int `json:"duplicate_bytes"`
		Files     []struct {
			Path string `json:"path"`
			Key  string `json:"key"`
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &g); err != nil || r.code != 0 {
		t.Fatalf("dups --json: exit %d %q: %v", r.code, r.stdout, err)
	}
	if g.Count != 2 || g.Size != 12 || g.Duplicate != 12 || g.Files[0].Path != a || g.Files[1].Key != calckey(t, b) {
		t.Errorf("dups group %+v", g)
	}
	if r = d.ctl("", "dups"); r.code != 0 || !strings.HasSuffix(r.stdout, " reclaimable of 12 B in extra copies\n") {
		t.Errorf("dups: %q", r.stdout)
	}
	if r = d.ctl("", "dups", "--min-size", "13"); r.code != 0 || !strings.Contains(r.stdout, "0 groups") {
		t.Errorf("dups --min-size 13: %q", r.stdout)
	}
	// Output that cannot be written is a failure, not a short list.
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	for _, args := range [][]string{{"dups"}, {"whereis", b}, {"lookup", a}, {"status"}} {
		cmd := exec.Command(bin.annexctl, args...)
		cmd.Env, cmd.Stdout = d.env, full
		var ee *exec.ExitError
		if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("%v > /dev/full: %v, want exit 1", args, err)
		}
	}
	if r = d.ctl("", "dups", "--min-size", "lots"); r.code != 2 {
		t.Errorf("dups --min-size lots: exit %d", r.code)
	}
	r = d.ctl("", "status", "--json")
	var st struct {
		Idle  bool  `json:"idle"`
		Files int64 `json:"files"`
		Roots []struct {
			Path string `json:"path"`
		} `json:"roots"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || !st.Idle || st.Files != 3 ||
		len(st.Roots) != 1 || st.Roots[0].Path != d.root {
		t.Errorf("status --json: %+v %v (%q)", st, err, r.stdout)
	}
}

func TestDaemonDown(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil)
	d.stop()
	for _, args := range [][]string{{"lookup", "/x"}, {"status"}, {"dups"}, {"whereis", "/x"}} {
		r := d.ctl("", args...)
		if r.code != 3 || !strings.Contains(r.stderr, "annexd is not running") ||
			!strings.Contains(r.stderr, d.socket) || !strings.Contains(r.stderr, "annexd DIR") ||
			strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	r := runCtl(t, os.Environ(), "", "", "--socket", "/nonexistent/annexd.sock", "status")
	if r.code != 3 || !strings.Contains(r.stderr, "/nonexistent/annexd.sock") {
		t.Errorf("--socket: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestBatchInteractive: --batch answers each line as soon as it is read,
// so annexctl works as a co-process (write a path, read its key).
func TestBatchInteractive(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(root string) {
		write(t, filepath.Join(root, "a.txt"), "a")
		write(t, filepath.Join(root, "b.txt"), "b")
	})
	cmd := exec.Command(bin.annexctl, "lookup", "--batch")
	cmd.Env = d.env
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(outPipe)
	for _, name := range []string{"a.txt", "missing", "b.txt"} {
		p := filepath.Join(d.root, name)
		if _, err := fmt.Fprintln(in, p); err != nil {
			t.Fatal(err)
		}
		got, err := readLineTimeout(out, 30*time.Second)
		if err != nil {
			t.Fatalf("%s: no answer while stdin stays open: %v", name, err)
		}
		want := ""
		if name != "missing" {
			want = calckey(t, p)
		}
		if got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	in.Close()
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("exit after EOF: %v, want exit 1 (one path had no key)", err)
	}
}

// readLineTimeout reads one line, giving up after d.
func readLineTimeout(r *bufio.Reader, d time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	c := make(chan res, 1)
	go func() {
		s, err := r.ReadString('\n')
		c <- res{strings.TrimSuffix(s, "\n"), err}
	}()
	select {
	case x := <-c:
		return x.s, x.err
	case <-time.After(d):
		return "", errors.New("timed out")
	}
}

// TestStatusWaitCoversWrites: after a burst of writes, status --wait
// returns once they are indexed, and plain lookups then answer them.
func TestStatusWaitCoversWrites(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil)
	var list strings.Builder
	for i := range 200 {
		p := filepath.Join(d.root, fmt.Sprintf("burst/%d/f%d.dat", i%10, i))
		write(t, p, fmt.Sprint("burst ", i))
		fmt.Fprintln(&list, p)
	}
	// No pause: files still in the watcher's quiet delay count as pending.
	if r := d.ctl("", "status", "--wait", "--timeout", "60s"); r.code != 0 {
		t.Fatalf("status --wait: exit %d %s", r.code, r.stderr)
	}
	r := d.ctl(list.String(), "lookup", "--batch")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 200 {
		t.Fatalf("%d answers", len(lines))
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, "SHA256E-s") {
			t.Errorf("file %d not indexed after status --wait: %q", i, l)
		}
	}
}

// TestOtherUserRefused: annexctl run as another user gets the daemon's
// refusal as one line and exit 3. (The test links the socket into an open
// directory so that user can reach it at all.)
func TestOtherUserRefused(t *testing.T) {
	t.Parallel()
	needRoot(t, "run annexctl as uid 65534")
	d := startDaemon(t, nil)
	open, err := os.MkdirTemp("", "e2e-open")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(open)
	link := filepath.Join(open, "s")
	for _, step := range []error{os.Chmod(open, 0o755), os.Link(d.socket, link), os.Chmod(link, 0o666)} {
		if step != nil {
			t.Fatal(step)
		}
	}
	ctl := filepath.Join(open, "annexctl")
	b, err := os.ReadFile(bin.annexctl)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ctl, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ctl, "--socket", link, "status")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(errb.String(), "refused this user") ||
		strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("as uid 65534: %v, stderr %q; want exit 3 and the refusal", err, errb.String())
	}
}
