package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
)

// asNobody prepares base for a daemon run as uid nobody (the permission
// bits that make a directory unreadable do not stop root): base and a copy
// of annexd that user may reach, and base/own, owned by nobody, for the
// index, the socket and the XDG directories.
func asNobody(t *testing.T, base string) annexdRun {
	t.Helper()
	needRoot(t, "run annexd as uid 65534")
	own := filepath.Join(base, "own")
	for _, step := range []error{os.Chmod(base, 0o755), os.Mkdir(own, 0o700), os.Chown(own, nobody, nobody)} {
		if step != nil {
			t.Fatal(step)
		}
	}
	b, err := os.ReadFile(bin.annexd)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(base, "annexd")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return annexdRun{base: own, exe: exe, cred: &syscall.Credential{Uid: nobody, Gid: nobody},
		env: func(env []string) []string { return append(env, "HOME="+own) }}
}

// statusJSON asks the daemon for its status.
func statusJSON(t *testing.T, d *daemon) api.Status {
	t.Helper()
	r := d.ctl("", "status", "--json")
	var st api.Status
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil {
		t.Fatalf("status --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return st
}

// waitStatus waits up to limit until ok accepts the daemon's status; a
// daemon that does not answer yet is asked again.
func waitStatus(t *testing.T, d *daemon, limit time.Duration, what string, ok func(api.Status) bool) api.Status {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		r := d.ctl("", "status", "--json")
		var st api.Status
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &st) == nil && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed %s within %v: exit %d\n%s%s\ndaemon log:\n%s", what, limit, r.code, r.stdout, r.stderr, d.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func rootNamed(st api.Status, path string) api.RootStatus {
	for _, r := range st.Roots {
		if r.Path == path {
			return r
		}
	}
	return api.RootStatus{}
}

// A root, and a directory in another root, that the daemon's user cannot
// read: status (JSON and text) and the metrics show both roots degraded
// with the reason instead of "scanned, watched" and "healthy"; once the
// modes are fixed the daemon watches and indexes them without a restart.
func TestUnreadableRootAndDirectory(t *testing.T) {
	t.Parallel()
	base := newBase(t)
	l := asNobody(t, base)
	open, shut := filepath.Join(base, "open"), filepath.Join(base, "shut")
	write(t, filepath.Join(open, "a.txt"), "readable")
	write(t, filepath.Join(open, "secret", "b.txt"), "in an unreadable directory")
	write(t, filepath.Join(shut, "c.txt"), "in an unreadable root")
	for _, dir := range []string{open, filepath.Join(open, "secret"), shut} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{filepath.Join(open, "secret"), shut} {
		if err := os.Chmod(dir, 0); err != nil {
			t.Fatal(err)
		}
	}
	l.roots = []string{open, shut}
	d := spawn(t, l)
	d.waitIdle()

	st := statusJSON(t, d)
	ro, rs := rootNamed(st, open), rootNamed(st, shut)
	if !ro.Degraded || !strings.Contains(ro.Reason, filepath.Join(open, "secret")) || !strings.Contains(ro.Reason, "permission denied") {
		t.Errorf("root with an unreadable directory: %+v, want degraded naming %s and the reason", ro, filepath.Join(open, "secret"))
	}
	if !rs.Degraded || rs.Watched || !strings.Contains(rs.Reason, "root") || !strings.Contains(rs.Reason, "permission denied") {
		t.Errorf("unreadable root: %+v, want degraded and not watched, with the reason", rs)
	}
	if st.Watcher.Healthy || st.Watcher.Message == "" {
		t.Errorf("watcher: %+v, want not healthy with a message", st.Watcher)
	}
	r := d.ctl("", "status")
	if r.code != 0 || strings.Count(r.stdout, "DEGRADED") < 3 || !strings.Contains(r.stdout, "permission denied") {
		t.Errorf("status:\n%s%s", r.stdout, r.stderr)
	}
	c := api.Dial(d.socket)
	defer c.Close()
	m, err := c.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`annexd_watcher_unreadable_dirs{root="` + open + `"} 1`, `annexd_watcher_unreadable_dirs{root="` + shut + `"} 1`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// Readable again: watched and indexed without a restart.
	for _, dir := range []string{filepath.Join(open, "secret"), shut} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus(t, d, time.Minute, "both roots healthy", func(st api.Status) bool {
		return st.Watcher.Healthy && !rootNamed(st, open).Degraded && rootNamed(st, shut).Watched
	})
	d.waitIdle()
	for _, f := range []string{filepath.Join(open, "secret", "b.txt"), filepath.Join(shut, "c.txt")} {
		if r := d.ctl("", "lookup", "--wait", "--timeout", "30s", f); r.code != 0 || strings.TrimSpace(r.stdout) != calckey(t, f) {
			t.Errorf("lookup %s once readable: exit %d %q %q", f, r.code, r.stdout, r.stderr)
		}
	}
	// A file written there now is seen by its watch.
	g := filepath.Join(shut, "new.txt")
	write(t, g, "new")
	if r := d.ctl("", "lookup", "--wait", "--timeout", "30s", g); r.code != 0 || strings.TrimSpace(r.stdout) != calckey(t, g) {
		t.Errorf("lookup of a new file in the recovered root: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}
