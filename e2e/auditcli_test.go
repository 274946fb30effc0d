package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/loopfs"
)

// waitAuditRunning polls audit status until a run asked for reads files,
// and returns its id.
func waitAuditRunning(t *testing.T, d *daemon) uint64 {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		st := auditStatus(t, d)
		if st.Run != nil && st.Run.Manual && st.Run.Bytes > 0 {
			return st.Run.ID
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run read a byte: %+v\n%s", st, d.log)
		}
	}
}

// auditStartID starts a run without waiting and returns its id.
func auditStartID(t *testing.T, d *daemon, args ...string) uint64 {
	t.Helper()
	r := d.ctl("", append([]string{"audit", "run", "--json"}, args...)...)
	var out struct{ ID uint64 }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || out.ID == 0 {
		t.Fatalf("audit run --json %v: exit %d %q %q", args, r.code, r.stdout, r.stderr)
	}
	return out.ID
}

// slowAuditTree writes 64 files of 512 KiB (contents from seed on) under
// a base whose audit reads 1 MB/s, so that a run lasts half a minute.
func slowAuditTree(t *testing.T, seed uint64) (base, root string) {
	base = dedupBase(t, auditConf+"max_rate = \"1MB/s\"\n")
	root = filepath.Join(base, "root")
	for i := range 64 {
		writeAged(t, filepath.Join(root, fmt.Sprint(i)), seed+uint64(i), 512<<10)
	}
	return base, root
}

// auditWaiter is annexctl audit run --wait, started, with its output.
type auditWaiter struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	id             uint64 // the run it waits for
}

// startAuditWait starts annexctl audit run --wait root against d and
// returns once the run is going.
func startAuditWait(t *testing.T, d *daemon, root string) *auditWaiter {
	t.Helper()
	w := &auditWaiter{cmd: exec.Command(bin.annexctl, "audit", "run", "--wait", root)}
	w.cmd.Env = d.env
	w.cmd.Stdout, w.cmd.Stderr = &w.stdout, &w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.id = waitAuditRunning(t, d)
	return w
}

// A daemon stopped while audit run --wait waits: annexctl says that
// annexd closed the connection and exits 3, as it does when annexd is
// killed. A restarted daemon never hands out a run id it used before, so
// a client waiting on one cannot be answered with another run.
func TestAuditRunWaitDaemonStops(t *testing.T) {
	t.Parallel()
	base, root := slowAuditTree(t, 1000)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		d := startOn(t, base, root)
		w := startAuditWait(t, d, root)
		d.exited = true
		if err := d.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		<-d.done
		err := w.cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 ||
			!strings.Contains(w.stderr.String(), "annexd closed the connection") {
			t.Fatalf("%v: audit run --wait: %v %q %q\n%s", sig, err, w.stdout.String(), w.stderr.String(), d.log)
		}
		d = startOn(t, base, root)
		if next := auditStartID(t, d, filepath.Join(root, "0")); next <= w.id {
			t.Fatalf("%v: the restarted daemon's run id %d, the last one before %d", sig, next, w.id)
		}
		d.stop()
	}
}

// A PATH at or below which nothing is indexed (a typo, an empty or new
// directory) starts no run: exit 1, never "done, 0 files checked".
func TestAuditRunNothingIndexed(t *testing.T) {
	t.Parallel()
	base := dedupBase(t, auditConf)
	root := filepath.Join(base, "root")
	writeAged(t, filepath.Join(root, "sub", "a"), 91, 100)
	if err := os.Mkdir(filepath.Join(root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := startOn(t, base, root)
	for _, p := range []string{filepath.Join(root, "nosuch"), filepath.Join(root, "empty"), filepath.Join(root, "su")} {
		r := d.ctl("", "audit", "run", "--wait", p)
		if r.code != 1 || !strings.Contains(r.stderr, "nothing is indexed at or below "+p) || r.stdout != "" {
			t.Errorf("audit run --wait %s: exit %d %q %q", p, r.code, r.stdout, r.stderr)
		}
	}
	r := d.ctl("", "audit", "run", "--wait", "--full-speed", filepath.Join(root, "sub", "a"))
	if r.code != 0 || !strings.Contains(r.stdout, ": 1 file checked, 100 B verified\n") {
		t.Errorf("audit run --wait of one file: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// A PATH through a symlinked directory outside the roots is resolved as
// everywhere (docs/cli.md, Paths): audit run and audit accept take it.
func TestAuditSymlinkedPath(t *testing.T) {
	t.Parallel()
	base := dedupBase(t, auditConf)
	root := filepath.Join(base, "root")
	writeAged(t, filepath.Join(root, "sub", "a"), 92, 100)
	link := filepath.Join(base, "link")
	if err := os.Symlink(filepath.Join(root, "sub"), link); err != nil {
		t.Fatal(err)
	}
	d := startOn(t, base, root)
	code, run := auditRun(t, d, "--full-speed", filepath.Join(link, "a"))
	if code != 0 || run.Counts["ok"] != 1 || run.StoppedBy != api.AuditDone {
		t.Fatalf("audit run through the link: exit %d %+v", code, run)
	}
	r := d.ctl("", "audit", "accept", filepath.Join(link, "a"))
	if want := "nothing is flagged at or below " + filepath.Join(root, "sub", "a"); r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Fatalf("audit accept through the link: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// A corrupt file whose name is not UTF-8 is listed with its raw name in
// the table (as every plain-text output prints names), with path_b64 in
// JSON, and audit accept takes the raw name and prints it back. With no
// problem left, problems --json prints nothing and exits 0.
func TestAuditProblemsNonUTF8(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 32 << 20})
	root := fs.Path("home")
	victim := filepath.Join(root, "caf\xe9.jpg")
	writeAged(t, victim, 93, 64<<10)
	d := startOn(t, dedupBase(t, auditConf), root)
	fs.Sync(t)
	fs.FlipByte(t, victim, 100)
	auditFindsOneCorrupt(t, d)
	r := d.ctl("", "audit", "problems")
	if r.code != 0 || !strings.Contains(r.stdout, victim+"\n") {
		t.Errorf("audit problems: exit %d %q, want the raw name %q", r.code, r.stdout, victim)
	}
	ps := auditProblems(t, d)
	if len(ps) != 1 || ps[0]["path_b64"] != base64.StdEncoding.EncodeToString([]byte(victim)) {
		t.Fatalf("problems --json: %v", ps)
	}
	r = d.ctl("", "audit", "accept", victim)
	if r.code != 0 || r.stdout != "accepted "+victim+"\n" {
		t.Fatalf("audit accept: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := d.ctl("", "audit", "problems", "--json"); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Fatalf("problems --json with none: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// --time-limit takes durations as the config's time_limit does, days too
// ("1d12h", as git annex fsck --time-limit takes them); a bad or negative
// one is exit 2 and starts nothing.
func TestAuditRunTimeLimitValues(t *testing.T) {
	t.Parallel()
	base := dedupBase(t, auditConf)
	root := filepath.Join(base, "root")
	writeAged(t, filepath.Join(root, "a"), 94, 100)
	d := startOn(t, base, root)
	code, run := auditRun(t, d, "--full-speed", "--time-limit", "1d12h", root)
	if code != 0 || run.TimeLimitSeconds != 36*3600 || run.StoppedBy != api.AuditDone {
		t.Fatalf("--time-limit 1d12h: exit %d %+v", code, run)
	}
	for _, v := range []string{"-1s", "abc", "5", "-1d"} {
		r := d.ctl("", "audit", "run", "--time-limit", v, root)
		if r.code != 2 || !strings.Contains(r.stderr, "--time-limit") || r.stdout != "" {
			t.Errorf("--time-limit %s: exit %d %q %q", v, r.code, r.stdout, r.stderr)
		}
	}
	if st := auditStatus(t, d); st.Run != nil {
		t.Errorf("a run goes on after the refusals: %+v", st.Run)
	}
}

// Ctrl-C on audit run --wait stops the waiting, not the run: annexctl says
// that the run goes on and exits 1, as dedup does when left; the daemon
// goes on reading.
func TestAuditRunWaitInterrupted(t *testing.T) {
	t.Parallel()
	base, root := slowAuditTree(t, 2000)
	d := startOn(t, base, root)
	w := startAuditWait(t, d, root)
	if err := w.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := w.cmd.Wait()
	var ee *exec.ExitError
	want := fmt.Sprintf("audit run %d goes on", w.id)
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(w.stderr.String(), want) {
		t.Fatalf("audit run --wait after SIGINT: %v %q %q", err, w.stdout.String(), w.stderr.String())
	}
	if st := auditStatus(t, d); st.Run == nil || st.Run.ID != w.id {
		t.Fatalf("the run did not go on: %+v", st)
	}
}

// The metrics have one annexd_audit_files_total series per class a run
// counts (the seven of docs/cli.md), and none for the internal outcomes of a
// file to be tried again; the coverage follows a run.
func TestAuditMetrics(t *testing.T) {
	t.Parallel()
	base := dedupBase(t, auditConf)
	root := filepath.Join(base, "root")
	writeAged(t, filepath.Join(root, "a"), 95, 100)
	writeAged(t, filepath.Join(root, "b"), 96, 100)
	d := startOn(t, base, root)
	if code, run := auditRun(t, d, "--full-speed", root); code != 0 || run.Counts["ok"] != 2 {
		t.Fatalf("audit run: exit %d %+v", code, run)
	}
	for _, c := range []string{"ok", "corrupt", "untraced", "lost_write", "modified", "missing", "unreadable"} {
		want := 0.0
		if c == "ok" {
			want = 2
		}
		if v := metric(t, d, `annexd_audit_files_total{class="`+c+`"}`); v != want {
			t.Errorf("files_total{class=%q} = %v, want %v", c, v, want)
		}
	}
	n := 0
	for _, line := range strings.Split(metricsText(t, d), "\n") {
		if strings.HasPrefix(line, "annexd_audit_files_total{") {
			n++
		}
	}
	if n != 7 {
		t.Errorf("%d annexd_audit_files_total series, want 7:\n%s", n, metricsText(t, d))
	}
	for deadline := time.Now().Add(30 * time.Second); metric(t, d, "annexd_audit_covered_files") != 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("covered files never 2:\n%s", metricsText(t, d))
		}
	}
	if v := metric(t, d, "annexd_audit_coverage_ratio"); v != 1 {
		t.Errorf("coverage ratio %v, want 1", v)
	}
}

// metricsText returns the daemon's /metrics.
func metricsText(t *testing.T, d *daemon) string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.socket)
	}}}
	resp, err := hc.Get("http://annexd/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
