package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
)

// TestWhereisKeyMustMatch: a key names content by backend, size and
// digest. A key with the right digest and the wrong size lists nothing,
// and a key of a hash the index does not hold says so.
func TestWhereisKeyMustMatch(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("0123456789"), 15000) // 150,000 bytes
	d := startDaemon(t, func(root string) {
		write(t, filepath.Join(root, "big1.bin"), string(big))
		write(t, filepath.Join(root, "sub", "big2.bin"), string(big))
	})
	big1, big2 := filepath.Join(d.root, "big1.bin"), filepath.Join(d.root, "sub", "big2.bin")
	sum := fmt.Sprintf("%x", sha256.Sum256(big))
	if r := d.ctl("", "whereis", "SHA256E-s150000--"+sum+".bin"); r.code != 0 || r.stdout != big1+"\n"+big2+"\n" {
		t.Errorf("the right key: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := d.ctl("", "whereis", "SHA256--"+sum); r.code != 0 || r.stdout != big1+"\n"+big2+"\n" {
		t.Errorf("a key without size: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r := d.ctl("", "whereis", "SHA256E-s1--"+sum)
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "no indexed file has this content") {
		t.Errorf("the wrong size: exit %d %q %q; want nothing listed, exit 1", r.code, r.stdout, r.stderr)
	}
	for _, k := range []string{
		fmt.Sprintf("SHA512E-s150000--%x.bin", sha512.Sum512(big)),
		fmt.Sprintf("MD5-s150000--%x", md5.Sum(big)),
	} {
		r := d.ctl("", "whereis", k)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "the index holds SHA256 digests only") ||
			strings.Contains(r.stderr, "no indexed file") {
			t.Errorf("%s: exit %d %q %q; want the backend named", k[:8], r.code, r.stdout, r.stderr)
		}
	}
}

// TestWhereisManyAndBatch: several arguments, or --batch, answer each
// argument with its list and an empty line (NUL with -z), nothing found
// included, and the exit status says whether all were found.
func TestWhereisManyAndBatch(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(root string) {
		write(t, filepath.Join(root, "a1"), "A")
		write(t, filepath.Join(root, "a2"), "A")
		write(t, filepath.Join(root, "line\nbreak"), "B")
	})
	a1, a2, nl := filepath.Join(d.root, "a1"), filepath.Join(d.root, "a2"), filepath.Join(d.root, "line\nbreak")
	none := "SHA256E-s1--" + strings.Repeat("0", 64)
	want := a1 + "\n" + a2 + "\n\n" + nl + "\n\n\n"
	if r := d.ctl("", "whereis", a1, nl, none); r.code != 1 || r.stdout != want || !strings.Contains(r.stderr, none) {
		t.Errorf("three arguments: exit %d %q %q; want %q and exit 1", r.code, r.stdout, r.stderr, want)
	}
	if r := d.ctl(a2+"\n"+calckey(t, nl)+"\n", "whereis", "--batch"); r.code != 0 || r.stdout != a1+"\n"+a2+"\n\n"+nl+"\n\n" {
		t.Errorf("--batch: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r := d.ctl(nl+"\x00"+none+"\x00", "whereis", "--batch", "-z")
	if r.code != 1 || r.stdout != nl+"\x00\x00\x00" {
		t.Errorf("--batch -z: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = d.ctl(a1+"\n"+none+"\n", "whereis", "--batch", "--json")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	var objs []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("--batch --json line %q: %v", l, err)
		}
		objs = append(objs, m)
	}
	if r.code != 1 || len(objs) != 4 || objs[0]["query"] != a1 || objs[0]["path"] != a1 || objs[1]["path"] != a2 ||
		objs[2]["end"] != true || objs[2]["count"] != 2.0 || objs[3]["query"] != none || objs[3]["count"] != 0.0 ||
		objs[3]["error"] == nil {
		t.Errorf("--batch --json: exit %d\n%s", r.code, r.stdout)
	}
}

// TestDupsCountsInodes: a hard link is another name of one copy, not a
// copy; dups says how many copies there are, marks the extra names, and
// -z keeps names with newlines whole.
func TestDupsCountsInodes(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(root string) {
		for i := range 5 {
			write(t, filepath.Join(root, fmt.Sprintf("copy%d", i)), "same bytes")
		}
		if err := os.Link(filepath.Join(root, "copy0"), filepath.Join(root, "link\nto copy0")); err != nil {
			t.Fatal(err)
		}
	})
	c0, link := filepath.Join(d.root, "copy0"), filepath.Join(d.root, "link\nto copy0")
	r := d.ctl("", "dups")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "5 copies (6 names) × 10 B, ") ||
		!strings.Contains(r.stdout, "  "+link+"  [hard link of "+c0+"]\n") {
		t.Errorf("dups: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = d.ctl("", "dups", "--json")
	var g struct {
		Count, Copies int
		Duplicate     int64 `json:"duplicate_bytes"`
		Files         []struct {
			Path   string `json:"path"`
			LinkOf string `json:"link_of"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &g); err != nil || r.code != 0 {
		t.Fatalf("dups --json: exit %d %q: %v", r.code, r.stdout, err)
	}
	links := 0
	for _, f := range g.Files {
		if f.LinkOf != "" {
			links++
			if f.Path != link || f.LinkOf != c0 {
				t.Errorf("link marked on %q (of %q)", f.Path, f.LinkOf)
			}
		}
	}
	if g.Count != 6 || g.Copies != 5 || g.Duplicate != 40 || links != 1 {
		t.Errorf("dups --json: %+v", g)
	}
	var want strings.Builder
	for _, name := range []string{"copy0", "copy1", "copy2", "copy3", "copy4", "link\nto copy0"} {
		want.WriteString(filepath.Join(d.root, name) + "\x00")
	}
	if r = d.ctl("", "dups", "-z"); r.code != 0 || r.stdout != want.String()+"\x00" {
		t.Errorf("dups -z: exit %d %q", r.code, r.stdout)
	}
	if r = d.ctl("", "dups", "--min-size", "0", "-z"); r.code != 0 || r.stdout != want.String()+"\x00" {
		t.Errorf("dups --min-size 0 -z: exit %d %q", r.code, r.stdout)
	}
}

// TestConventions: --version on both programs, completion of flag
// values, and one exit status for "some inputs failed" in every --batch.
func TestConventions(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(root string) { write(t, filepath.Join(root, "a"), "a") })
	for _, prog := range []string{bin.annexd, bin.annexctl} {
		r := runProg(t, prog, "--version")
		if r.code != 0 || !strings.HasPrefix(r.stdout, filepath.Base(prog)+" ") || !strings.Contains(r.stdout, "go1.") {
			t.Errorf("%s --version: exit %d %q %q", filepath.Base(prog), r.code, r.stdout, r.stderr)
		}
	}
	for _, c := range []struct {
		prog string
		args []string
		want string
	}{
		{bin.annexctl, []string{"__complete", "calckey", "--backend", ""}, "BLAKE2B256E\n"},
		{bin.annexd, []string{"__complete", "--backend", ""}, "SHA512E\n"},
		{bin.annexd, []string{"__complete", "--log-level", ""}, "debug\ninfo\nwarn\nerror\n"},
		{bin.annexd, []string{"__complete", "--calibrate", ""}, "auto\nalways\nnever\n"},
	} {
		if r := runProg(t, c.prog, c.args...); r.code != 0 || !strings.Contains(r.stdout, c.want) {
			t.Errorf("%s %v: exit %d %q", filepath.Base(c.prog), c.args, r.code, r.stdout)
		}
	}
	a, missing := filepath.Join(d.root, "a"), filepath.Join(d.root, "missing")
	for _, args := range [][]string{{"lookup", "--batch"}, {"calckey", "--batch"}, {"whereis", "--batch"}} {
		r := d.ctl(a+"\n"+missing+"\n", args...)
		if r.code != 1 || !strings.HasPrefix(r.stdout, calckey(t, a)) && args[0] != "whereis" {
			t.Errorf("%v with a missing file: exit %d %q %q; want the answers and exit 1", args, r.code, r.stdout, r.stderr)
		}
		if r := d.ctl(a+"\n", args...); r.code != 0 {
			t.Errorf("%v: exit %d %q", args, r.code, r.stderr)
		}
	}
}

// runProg runs one of the built programs without a daemon.
func runProg(t *testing.T, prog string, args ...string) result {
	t.Helper()
	return runCmd(t, prog, args, nil)
}

// gitIn runs git (or git annex) in dir without the machine's git
// configuration, and fails the test on an error.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(gitEnv(), "GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@annexd.invalid",
		"GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@annexd.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestGitAnnexLockedFile: a locked annexed file (a symlink into
// .git/annex/objects) is looked up as git annex lookupkey does, and
// whereis finds the other copies of its content.
func TestGitAnnexLockedFile(t *testing.T) {
	t.Parallel()
	var want string
	d := startDaemon(t, func(root string) {
		repo := filepath.Join(root, "repo")
		if err := os.Mkdir(repo, 0o755); err != nil {
			t.Fatal(err)
		}
		gitIn(t, repo, "init", "-q")
		gitIn(t, repo, "annex", "init", "-q", "e2e")
		write(t, filepath.Join(repo, "photo.jpg"), "annexed content")
		gitIn(t, repo, "annex", "add", "-q", "photo.jpg")
		want = gitIn(t, repo, "annex", "lookupkey", "photo.jpg")
		write(t, filepath.Join(root, "copy.jpg"), "annexed content")
	})
	f := filepath.Join(d.root, "repo", "photo.jpg")
	if fi, err := os.Lstat(f); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("git annex add left no symlink: %v %v", fi, err)
	}
	if r := d.ctl("", "lookup", f); r.code != 0 || strings.TrimSpace(r.stdout) != want {
		t.Errorf("lookup of the annexed file: exit %d %q %q; git annex lookupkey says %s", r.code, r.stdout, r.stderr, want)
	}
	var res struct{ State, Key string }
	if r := d.ctl(f+"\n", "lookup", "--batch", "--json"); json.Unmarshal([]byte(r.stdout), &res) != nil ||
		res.State != "annex_link" || res.Key != want || r.code != 0 {
		t.Errorf("lookup --batch --json: exit %d %q", r.code, r.stdout)
	}
	if r := d.ctl("", "whereis", f); r.code != 0 || r.stdout != filepath.Join(d.root, "copy.jpg")+"\n" {
		t.Errorf("whereis of the annexed file: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// TestGitAnnexObjectsOnRequest: with [ignore] annex_objects the annex's
// object store is indexed, so whereis of a file lists its annexed copy;
// without it the store stays out with the rest of .git.
func TestGitAnnexObjectsOnRequest(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint("annex_objects=", on), func(t *testing.T) {
			base, root := newRoot(t, func(root string) {
				gitIn(t, root, "init", "-q")
				gitIn(t, root, "annex", "init", "-q", "e2e")
				write(t, filepath.Join(root, "photo.jpg"), "annexed content")
				gitIn(t, root, "annex", "add", "-q", "photo.jpg")
				write(t, filepath.Join(root, "copy.jpg"), "annexed content")
			})
			cfg := filepath.Join(base, "annexd.toml")
			if err := os.WriteFile(cfg, fmt.Appendf(nil, "[ignore]\nannex_objects = %v\n", on), 0o600); err != nil {
				t.Fatal(err)
			}
			d := spawn(t, annexdRun{base: base, roots: []string{root}, extra: []string{"-c", cfg}})
			d.waitIdle()
			obj, err := filepath.EvalSymlinks(filepath.Join(root, "photo.jpg"))
			if err != nil {
				t.Fatal(err)
			}
			want := filepath.Join(root, "copy.jpg") + "\n\n" // a blank line ends each argument's list
			if on {
				want = obj + "\n" + want
			}
			r := d.ctl("", "whereis", filepath.Join(root, "copy.jpg"), filepath.Join(root, "photo.jpg"))
			if r.code != 0 || r.stdout != want+want {
				t.Errorf("whereis: exit %d %q %q; want %q twice", r.code, r.stdout, r.stderr, want)
			}
			if r := d.ctl("", "lookup", filepath.Join(root, ".git", "config")); r.code == 0 {
				t.Errorf("lookup of .git/config: exit 0 %q; the rest of .git must stay out", r.stdout)
			}
		})
	}
}

// TestOverflowShownInStatus overflows the daemon's inotify queue for real
// (the daemon is stopped while more events are made than the kernel
// queues) and checks that status, its JSON and the metrics say when the
// overflow was and that a rescan followed.
func TestOverflowShownInStatus(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Fatal(err)
	}
	var limit int
	if _, err := fmt.Sscan(string(b), &limit); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, nil)
	if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	n := limit/2 + 4096 // each file makes three events: create, modify, close
	for i := range n {
		if err := os.WriteFile(filepath.Join(d.root, fmt.Sprintf("f%d", i)), []byte{byte(i)}, 0o644); err != nil {
			d.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatal(err)
		}
	}
	if err := d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	d.waitIdle()
	r := d.ctl("", "status", "--json")
	var st struct {
		Files int
		Roots []struct {
			Overflows     int
			LastOverflow  time.Time `json:"last_overflow"`
			LastRescan    time.Time `json:"last_rescan"`
			RescanPending bool      `json:"rescan_pending"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Roots) != 1 {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	root := st.Roots[0]
	if root.Overflows < 1 || root.LastOverflow.IsZero() || root.LastRescan.Before(root.LastOverflow) || root.RescanPending {
		t.Errorf("status --json after an overflow: %+v", root)
	}
	if st.Files != n {
		t.Errorf("%d files indexed after the rescan, want %d", st.Files, n)
	}
	if r := d.ctl("", "status"); !strings.Contains(r.stdout, "inotify queue overflow") || !strings.Contains(r.stdout, "rescanned at") {
		t.Errorf("status does not tell of the overflow:\n%s", r.stdout)
	}
	c := api.Dial(d.socket)
	defer c.Close()
	m, err := c.Metrics(context.Background())
	if err != nil || !strings.Contains(string(m), "annexd_watcher_last_overflow_timestamp_seconds{") ||
		!strings.Contains(string(m), "annexd_watcher_last_rescan_timestamp_seconds{") {
		t.Errorf("metrics lack the overflow times (%v)", err)
	}
}
