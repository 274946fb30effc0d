package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// changesJSON lists changes --since cursor --json; it fails unless the
// exit status is 0.
func changesJSON(t *testing.T, d *daemon, cursor string) []map[string]any {
	t.Helper()
	r := d.ctl("", "changes", "--since", cursor, "--json")
	if r.code != 0 {
		t.Fatalf("changes --since %s: exit %d\n%s%s", cursor, r.code, r.stdout, r.stderr)
	}
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("changes --json line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// cursorNow is changes --now.
func cursorNow(t *testing.T, d *daemon) string {
	t.Helper()
	r := d.ctl("", "changes", "--now")
	c := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.Contains(c, ":") {
		t.Fatalf("changes --now: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	return c
}

// byPath indexes changes by path; a path changed twice fails the test.
func byPath(t *testing.T, cs []map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, c := range cs {
		p := c["path"].(string)
		if _, dup := out[p]; dup {
			t.Fatalf("two changes of %s: %v", p, cs)
		}
		out[p] = c
	}
	return out
}

// An edit, a rename, a deletion and a rotten file the audit finds, with a
// restart in between: the feed lists an edit with both keys, one move,
// a delete, and the rot as rot with the good key, never as an edit; then
// the changes after the restart, and the plain and -z forms.
func TestChangesFeed(t *testing.T) {
	t.Parallel()
	fs, root := rotImage(t)
	edited, renamed, deleted, rotten := filepath.Join(root, "e.txt"), filepath.Join(root, "m.txt"),
		filepath.Join(root, "d.txt"), filepath.Join(root, "photo.jpg")
	moved := filepath.Join(root, "sub", "moved.txt")
	write(t, edited, "first\n")
	write(t, renamed, "moving\n")
	write(t, deleted, "going\n")
	writeAged(t, rotten, 7, 64<<10)
	if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := dedupBase(t, auditConf)
	run := annexdRun{base: base, roots: []string{root}}
	d := spawn(t, run)
	d.waitIdle()
	keys := map[string]string{}
	for _, p := range []string{edited, renamed, deleted, rotten} {
		keys[p] = lookupJSON(t, d, p)["key"].(string)
	}
	cursor := cursorNow(t, d)

	write(t, edited, "second, longer\n")
	if err := os.Rename(renamed, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(deleted); err != nil {
		t.Fatal(err)
	}
	d.waitIdle()
	rot(t, fs, rotten)
	if code, r := auditRun(t, d, "--full-speed", rotten); code != 4 || r.Counts["corrupt"] != 1 {
		t.Fatalf("audit: exit %d, %+v\n%s", code, r, d.log)
	}
	d.stop()
	d = spawn(t, run)
	d.waitIdle()

	cs := changesJSON(t, d, cursor)
	got := byPath(t, cs)
	if len(cs) != 4 {
		t.Errorf("%d changes, want 4: %v", len(cs), cs)
	}
	want := map[string]map[string]any{
		edited:  {"kind": "edit", "old_key": keys[edited], "new_key": calckey(t, edited)},
		moved:   {"kind": "move", "from": renamed, "old_key": keys[renamed], "new_key": calckey(t, moved)},
		deleted: {"kind": "delete", "old_key": keys[deleted]},
		rotten:  {"kind": "rot", "finding": "corrupt", "old_key": keys[rotten]},
	}
	for p, w := range want {
		for k, v := range w {
			if got[p][k] != v {
				t.Errorf("change of %s: %s is %v, want %v (%v)", p, k, got[p][k], v, got[p])
			}
		}
	}
	if got[rotten]["new_key"] != nil {
		t.Errorf("the rot carries a new key: %v", got[rotten])
	}
	last := cs[len(cs)-1]["cursor"].(string)

	write(t, filepath.Join(root, "after.txt"), "after the restart\n")
	d.waitIdle()
	r := d.ctl("", "changes", "--since", last)
	fields := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\t")
	if r.code != 0 || len(fields) != 5 || fields[1] != "add" || fields[2] != "-" || fields[4] != filepath.Join(root, "after.txt") ||
		fields[3] != calckey(t, filepath.Join(root, "after.txt")) {
		t.Errorf("changes after the restart: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = d.ctl("", "changes", "--since", cursor, "-z")
	if n := strings.Count(r.stdout, "\x00"); r.code != 0 || n != 6*5 || !strings.Contains(r.stdout, "move\x00") {
		t.Errorf("changes -z: exit %d, %d fields, want 30: %q", r.code, n, r.stdout)
	}
}

// A cursor older than the feed keeps, and one of an index that was
// rebuilt, exit 7; a bad cursor exits 2.
func TestChangesResync(t *testing.T) {
	t.Parallel()
	base := dedupBase(t, "[changes]\nkeep = 2\n")
	root := filepath.Join(base, "root")
	write(t, filepath.Join(root, "a"), "a")
	run := annexdRun{base: base, roots: []string{root}}
	d := spawn(t, run)
	d.waitIdle()
	cursor := cursorNow(t, d)
	for _, n := range []string{"b", "c", "d"} {
		write(t, filepath.Join(root, n), n)
	}
	d.waitIdle()
	if r := d.ctl("", "changes", "--since", cursor); r.code != 7 || !strings.Contains(r.stderr, "no longer kept") {
		t.Errorf("a cursor behind the feed: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if cs := changesJSON(t, d, cursorNow(t, d)); len(cs) != 0 {
		t.Errorf("changes after --now: %v", cs)
	}
	if r := d.ctl("", "changes", "--since", "soon"); r.code != 2 {
		t.Errorf("a bad cursor: exit %d %q", r.code, r.stderr)
	}
	now := cursorNow(t, d)
	d.stop()
	if err := os.Remove(filepath.Join(base, "index.db")); err != nil {
		t.Fatal(err)
	}
	d = spawn(t, run)
	d.waitIdle()
	if r := d.ctl("", "changes", "--since", now); r.code != 7 {
		t.Errorf("the cursor of the index before it was rebuilt: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// --follow lists a change made after it started, and ends with exit 0 on
// SIGINT.
func TestChangesFollow(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil)
	cursor := cursorNow(t, d)
	cmd := exec.Command(bin.annexctl, "changes", "--since", cursor, "--follow", "--json")
	cmd.Env = d.env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		done <- cmd.Wait()
	}()
	time.Sleep(300 * time.Millisecond)
	path := filepath.Join(d.root, "new.txt")
	write(t, path, "made while following\n")
	select {
	case l := <-lines:
		var c map[string]any
		if err := json.Unmarshal([]byte(l), &c); err != nil || c["kind"] != "add" || c["path"] != path {
			t.Fatalf("--follow printed %q (%v)", l, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("--follow printed nothing for a change made after it started\n%s", stderr.String())
	}
	cmd.Process.Signal(syscall.SIGINT)
	for range lines {
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Errorf("--follow after SIGINT: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("--follow did not end within 10s of SIGINT")
	}
}

// A rotten file whose ctime alone moves (a chmod) is found by the
// indexer, not the audit: the feed lists it as rot:untraced with the key
// kept, never as an edit; accepting the bytes afterwards is an edit.
func TestChangesRotFoundByIndexer(t *testing.T) {
	t.Parallel()
	fs, root := rotImage(t)
	p := filepath.Join(root, "chmod.bin")
	writeAged(t, p, 330, 64<<10)
	d := startOn(t, dedupBase(t, auditConf), root)
	good := lookupJSON(t, d, p)["key"].(string)
	cursor := cursorNow(t, d)
	rot(t, fs, p)
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	d.waitIdle()
	cs := changesJSON(t, d, cursor)
	if len(cs) != 1 || cs[0]["kind"] != "rot" || cs[0]["finding"] != "untraced" || cs[0]["old_key"] != good ||
		cs[0]["path"] != p || cs[0]["new_key"] != nil {
		t.Fatalf("changes %v; want one rot:untraced of %s keeping %s", cs, p, good)
	}
	if r := d.ctl("", "audit", "accept", p); r.code != 0 {
		t.Fatalf("accept: exit %d %q", r.code, r.stderr)
	}
	cs = changesJSON(t, d, cs[0]["cursor"].(string))
	if len(cs) != 1 || cs[0]["kind"] != "edit" || cs[0]["old_key"] != good || cs[0]["new_key"] != calckey(t, p) {
		t.Errorf("after accept: %v; want an edit to the bytes on disk", cs)
	}
}
