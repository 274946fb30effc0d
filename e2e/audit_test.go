package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/loopfs"
)

// auditConf keeps the audit from waiting for a quiet machine: the tests
// share the CPUs with others, and a load gate would hold a run for ever.
const auditConf = "[audit]\nmax_load = -1.0\nignore_battery = true\n"

// writeAged writes size random bytes (seed) with an mtime an hour old, so
// the record hashed from them is never racily clean.
func writeAged(t *testing.T, path string, seed uint64, size int) {
	t.Helper()
	writeRandom(t, path, seed, size)
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
}

// lookupJSON returns lookup --json of path.
func lookupJSON(t *testing.T, d *daemon, path string) map[string]any {
	t.Helper()
	r := d.ctl("", "lookup", "--json", path)
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("lookup --json %s: exit %d %q %q", path, r.code, r.stdout, r.stderr)
	}
	return m
}

// auditRun runs audit run --wait --json with args and returns the exit
// status and the run.
func auditRun(t *testing.T, d *daemon, args ...string) (int, api.AuditRun) {
	t.Helper()
	r := d.ctl("", append([]string{"audit", "run", "--wait", "--json"}, args...)...)
	var run api.AuditRun
	if err := json.Unmarshal([]byte(r.stdout), &run); err != nil {
		t.Fatalf("audit run --wait --json %v: exit %d %q %q\n%s", args, r.code, r.stdout, r.stderr, d.log)
	}
	return r.code, run
}

// auditProblems returns audit problems --json, one object a line.
func auditProblems(t *testing.T, d *daemon) []map[string]any {
	t.Helper()
	r := d.ctl("", "audit", "problems", "--json")
	if r.code != 0 {
		t.Fatalf("audit problems --json: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("problem line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// auditStatus returns audit status --json.
func auditStatus(t *testing.T, d *daemon) api.AuditStatus {
	t.Helper()
	r := d.ctl("", "audit", "status", "--json")
	var st api.AuditStatus
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil {
		t.Fatalf("audit status --json: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	return st
}

// A byte flipped in a file's blocks on an ext4 image, behind the file
// system's back (stat unchanged, no event), is corruption: audit run
// exits 4, problems lists the file with both digests, and lookup keeps
// handing out the old key, marked corrupt. Once accepted, the file is no
// problem and its key is the one of its bytes now.
func TestAuditBitFlipExt4(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := fs.Path("home")
	victim, other := filepath.Join(root, "photo.jpg"), filepath.Join(root, "other.bin")
	writeAged(t, victim, 41, 256<<10)
	writeAged(t, other, 42, 64<<10)
	d := startOn(t, dedupBase(t, auditConf), root)
	before := lookupJSON(t, d, victim)
	if before["state"] != "current" || before["verified_at"] == nil {
		t.Fatalf("lookup before the flip: %v", before)
	}
	if _, err := time.Parse(time.RFC3339Nano, before["verified_at"].(string)); err != nil {
		t.Fatalf("verified_at %v: %v", before["verified_at"], err)
	}
	oldKey := before["key"].(string)
	fs.Sync(t)
	fs.FlipByte(t, victim, 1000)

	code, run := auditRun(t, d)
	if code != 4 || run.Counts["corrupt"] != 1 || run.Counts["ok"] != 1 || run.StoppedBy != api.AuditDone {
		t.Fatalf("audit run: exit %d, %+v\n%s", code, run, d.log)
	}
	ps := auditProblems(t, d)
	if len(ps) != 1 {
		t.Fatalf("problems %v", ps)
	}
	p := ps[0]
	data, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	now := sha256.Sum256(data)
	if p["path"] != victim || p["state"] != "corrupt" || p["observed"] != hex.EncodeToString(now[:]) ||
		!strings.HasSuffix(strings.TrimSuffix(oldKey, ".jpg"), p["recorded"].(string)) || p["recorded"] == p["observed"] ||
		p["backend"] != "SHA256E" || p["size"] != float64(256<<10) {
		t.Fatalf("problem %v; key before %s", p, oldKey)
	}
	if _, err := time.Parse(time.RFC3339, p["seen"].(string)); err != nil {
		t.Errorf("seen %v: %v", p["seen"], err)
	}
	if l := lookupJSON(t, d, victim); l["state"] != "corrupt" || l["key"] != oldKey {
		t.Fatalf("lookup after the audit: %v, want corrupt with %s", l, oldKey)
	}
	if st := auditStatus(t, d); st.Problems != 1 {
		t.Errorf("status counts %d problems", st.Problems)
	}

	r := d.ctl("", "audit", "accept", victim)
	if r.code != 0 || r.stdout != "accepted "+victim+"\n" {
		t.Fatalf("accept: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if ps := auditProblems(t, d); len(ps) != 0 {
		t.Errorf("problems after accept: %v", ps)
	}
	if l := lookupJSON(t, d, victim); l["state"] != "current" || !strings.Contains(l["key"].(string), hex.EncodeToString(now[:])) {
		t.Errorf("lookup after accept: %v", l)
	}
	if code, run := auditRun(t, d, victim); code != 0 || run.Counts["ok"] != 1 {
		t.Errorf("audit run after accept: exit %d, %+v", code, run)
	}
}

// An edit and a deletion made while the daemon runs are changes, not
// problems: the run exits 0, nothing is listed, the edit is indexed again
// and the deleted file is gone from the index.
func TestAuditEditAndDelete(t *testing.T) {
	t.Parallel()
	base := dedupBase(t, auditConf)
	root := filepath.Join(base, "root")
	edited, gone, kept := filepath.Join(root, "edited.txt"), filepath.Join(root, "gone.txt"), filepath.Join(root, "kept.txt")
	for i, p := range []string{edited, gone, kept} {
		writeAged(t, p, uint64(50+i), 4096)
	}
	d := startOn(t, base, root)
	write(t, edited, "new content, a new mtime")
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	code, run := auditRun(t, d, "--full-speed") // at once: the indexer may not have seen the changes yet
	if code != 0 || run.Counts["corrupt"]+run.Counts["unreadable"]+run.Counts["lost_write"] != 0 || run.Counts["ok"] < 1 {
		t.Fatalf("audit run: exit %d, %+v\n%s", code, run, d.log)
	}
	t.Logf("the run decided %v", run.Counts)
	if ps := auditProblems(t, d); len(ps) != 0 {
		t.Fatalf("problems %v", ps)
	}
	d.waitIdle()
	sum := sha256.Sum256([]byte("new content, a new mtime"))
	if l := lookupJSON(t, d, edited); l["state"] != "current" || !strings.Contains(l["key"].(string), hex.EncodeToString(sum[:])) {
		t.Errorf("the edit was not indexed: %v", l)
	}
	if l := lookupJSON(t, d, gone); l["state"] != "missing" {
		t.Errorf("lookup of the deleted file: %v", l)
	}
	if r := d.ctl("", "whereis", kept); r.code != 0 || strings.Contains(r.stdout, gone) {
		t.Errorf("whereis: exit %d %q", r.code, r.stdout)
	}
}

// A time limit stops a run with nothing found: exit 101. The next run
// goes on with the pass where it stopped: together they verify every file
// once, and the pass is complete.
func TestAuditTimeLimit(t *testing.T) {
	t.Parallel()
	const files, size = 24, 1 << 20
	base := dedupBase(t, auditConf+"max_rate = \"8MB/s\"\n")
	root := filepath.Join(base, "root")
	for i := range files {
		writeAged(t, filepath.Join(root, strconv.Itoa(i)), uint64(60+i), size)
	}
	d := startOn(t, base, root)
	code, first := auditRun(t, d, "--time-limit", "500ms")
	if code != 101 || first.StoppedBy != api.AuditTimeLimit || first.Counts["ok"] >= files {
		t.Fatalf("run with a time limit: exit %d, %+v", code, first)
	}
	code, second := auditRun(t, d)
	if code != 0 || second.StoppedBy != api.AuditDone {
		t.Fatalf("second run: exit %d, %+v", code, second)
	}
	if n := first.Counts["ok"] + second.Counts["ok"]; n != files || len(first.Counts) > 1 || len(second.Counts) > 1 {
		t.Fatalf("the runs verified %v and %v: %d files, want %d, each once", first.Counts, second.Counts, n, files)
	}
	st := auditStatus(t, d)
	if st.LastPass == nil || st.LastPass.Counts["ok"] != files || st.Pass != nil {
		t.Fatalf("status after the pass: %+v", st)
	}
	// The coverage is counted again once the run has ended.
	for deadline := time.Now().Add(30 * time.Second); st.Coverage.Files != files; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("coverage after the pass: %+v", st.Coverage)
		}
		st = auditStatus(t, d)
	}
}

// A paused audit stays paused when the daemon restarts, until resumed.
func TestAuditPauseSurvivesRestart(t *testing.T) {
	t.Parallel()
	base := dedupBase(t, auditConf)
	root := filepath.Join(base, "root")
	writeAged(t, filepath.Join(root, "a"), 70, 100)
	d := startOn(t, base, root)
	if r := d.ctl("", "audit", "pause"); r.code != 0 || !strings.HasPrefix(r.stdout, "audit: paused") {
		t.Fatalf("pause: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	d.stop()
	d = startOn(t, base, root)
	if st := auditStatus(t, d); st.State != "paused" {
		t.Fatalf("after the restart: %+v", st)
	}
	if r := d.ctl("", "status"); !strings.Contains(r.stdout, "audit:   paused") {
		t.Errorf("status: %q", r.stdout)
	}
	if r := d.ctl("", "audit", "resume"); r.code != 0 || strings.Contains(r.stdout, "paused") {
		t.Fatalf("resume: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if st := auditStatus(t, d); st.State == "paused" {
		t.Fatalf("after resume: %+v", st)
	}
}

// A file made unreadable (chmod 000) for the daemon, which runs as nobody,
// is unreadable: the run exits 5 and problems lists it. The watcher holds
// the chmod (a long quiet delay), so the audit meets it first.
func TestAuditUnreadable(t *testing.T) {
	t.Parallel()
	needRoot(t, "run annexd as uid 65534")
	base := dedupBase(t, "")
	root := filepath.Join(base, "root")
	locked, fine := filepath.Join(root, "locked.bin"), filepath.Join(root, "fine.bin")
	writeAged(t, locked, 80, 8192)
	writeAged(t, fine, 81, 8192)
	giveToNobody(t, base, root, locked, fine)
	d := startAs(t, base, nobody, root, "--quiet-delay", "1h")
	if err := os.Chmod(locked, 0); err != nil {
		t.Fatal(err)
	}
	r := ctlAs(t, d, nobody, "audit", "run", "--wait", "--full-speed")
	if r.code != 5 || !strings.Contains(r.stdout, "unreadable  1") {
		t.Fatalf("audit run: exit %d %q %q\n%s", r.code, r.stdout, r.stderr, d.log)
	}
	r = ctlAs(t, d, nobody, "audit", "problems", "--json")
	var p map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &p) != nil || p["path"] != locked || p["state"] != "unreadable" ||
		p["recorded"] == nil {
		t.Fatalf("problems: exit %d %q", r.code, r.stdout)
	}
}

// giveToNobody chowns paths to nobody, who must also reach annexctl.
func giveToNobody(t *testing.T, paths ...string) {
	t.Helper()
	if err := os.Chmod(bin.dir, 0o755); err != nil { // nobody runs annexctl from there
		t.Fatal(err)
	}
	for _, p := range paths {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
}

// waitIndexedUnreadable waits until the indexer's record, not a lookup's
// own try, says path could not be read.
func waitIndexedUnreadable(t *testing.T, d *daemon, path string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		l := lookupJSON(t, d, path)
		if l["state"] == "unreadable" && l["message"] == "could not be read when last tried" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the indexer did not record %s unreadable: %v\n%s", path, l, d.log)
		}
	}
}

// A file made unreadable in normal use is a problem too. The daemon runs
// as nobody with the default quiet delay, so the indexer sees the chmod
// first: it cannot hash the file and records it unreadable, keeping the
// last digest known. The run then re-tries the file: exit 5, and problems
// lists it with that digest. Made readable again, it is no problem.
func TestAuditUnreadableIndexedFirst(t *testing.T) {
	t.Parallel()
	needRoot(t, "run annexd as uid 65534")
	base := dedupBase(t, auditConf)
	root := filepath.Join(base, "root")
	locked, fine := filepath.Join(root, "locked.bin"), filepath.Join(root, "fine.bin")
	writeAged(t, locked, 82, 8192)
	writeAged(t, fine, 83, 8192)
	giveToNobody(t, base, root, locked, fine)
	d := startAs(t, base, nobody, root)
	before := lookupJSON(t, d, locked)
	if before["state"] != "current" {
		t.Fatalf("lookup before the chmod: %v", before)
	}
	if err := os.Chmod(locked, 0); err != nil {
		t.Fatal(err)
	}
	// The indexer's record, not lookup's own try, says it: wait for that.
	waitIndexedUnreadable(t, d, locked)
	d.waitIdle()
	r := ctlAs(t, d, nobody, "audit", "run", "--wait")
	if r.code != 5 || !strings.Contains(r.stdout, "unreadable  1") {
		t.Fatalf("audit run: exit %d %q %q\n%s", r.code, r.stdout, r.stderr, d.log)
	}
	r = ctlAs(t, d, nobody, "audit", "problems", "--json")
	var p map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &p) != nil || p["path"] != locked || p["state"] != "unreadable" {
		t.Fatalf("problems: exit %d %q", r.code, r.stdout)
	}
	if rec, _ := p["recorded"].(string); rec == "" || !strings.Contains(before["key"].(string), "--"+rec) {
		t.Errorf("problem %v: recorded digest is not that of the key before, %s", p, before["key"])
	}

	if err := os.Chmod(locked, 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if l := lookupJSON(t, d, locked); l["state"] == "current" && l["key"] == before["key"] {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("readable again, the file is not current: %v", l)
		}
	}
	d.waitIdle()
	if ps := auditProblems(t, d); len(ps) != 0 {
		t.Errorf("problems once readable again: %v", ps)
	}
	if code, run := auditRun(t, d, root); code != 0 || run.Counts["ok"] != 2 {
		t.Errorf("audit run once readable again: exit %d, %+v", code, run)
	}
}

// A rewrite of the same size with the mtime put back leaves only ctime
// moved (user space cannot set it): modified, not corrupt. The watcher
// holds the event (a long quiet delay), so the audit meets the change
// first and hands it to the indexer, which records the new key: exit 0.
// The runs go at full speed: the held event keeps the indexer gate shut.
func TestAuditSameSizeRewrite(t *testing.T) {
	t.Parallel()
	base := dedupBase(t, auditConf)
	root := filepath.Join(base, "root")
	victim, other := filepath.Join(root, "doc.txt"), filepath.Join(root, "other.txt")
	writeAged(t, victim, 90, 4096)
	writeAged(t, other, 91, 4096)
	d := spawn(t, annexdRun{base: base, roots: []string{root}, extra: []string{"--quiet-delay", "1h"}})
	d.waitIdle()
	before := lookupJSON(t, d, victim)
	fi, err := os.Stat(victim)
	if err != nil || before["state"] != "current" {
		t.Fatalf("before the rewrite: %v %v", before, err)
	}
	writeRandom(t, victim, 92, 4096)
	if err := os.Chtimes(victim, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(victim); after.Size() != fi.Size() || !after.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("the rewrite moved size or mtime: %v %v", after.Size(), after.ModTime())
	}
	code, run := auditRun(t, d, "--full-speed")
	if code != 0 || run.Counts["modified"] != 1 || run.Counts["ok"] != 1 || len(run.Counts) != 2 {
		t.Fatalf("audit run: exit %d, %+v\n%s", code, run, d.log)
	}
	if ps := auditProblems(t, d); len(ps) != 0 {
		t.Fatalf("problems %v", ps)
	}
	data, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		l := lookupJSON(t, d, victim)
		if l["state"] == "current" && strings.Contains(l["key"].(string), "--"+want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lookup after the run: %v, want the key of %s (before: %s)", l, want, before["key"])
		}
	}
	if code, run := auditRun(t, d, "--full-speed", victim); code != 0 || run.Counts["ok"] != 1 || len(run.Counts) != 1 {
		t.Errorf("audit of the rewritten file: exit %d, %+v", code, run)
	}
}

// A daemon killed (SIGKILL) in the middle of a pass goes on with that pass
// after a restart: the pass keeps its id and its count of files verified
// before the kill, the run after the restart reads only the rest, and the
// pass ends with every file counted once. The files are hashed longer
// than the data window before the kill, so the unclean end does not make
// the indexer hash them again (store.Trusted): the pass alone reads them.
func TestAuditKilledMidPassResumes(t *testing.T) {
	t.Parallel()
	const files, size = 24, 1 << 20
	// Scheduled runs are off: one resuming the pass by itself after the
	// restart would race the run the test asks for.
	base := dedupBase(t, auditConf+"max_rate = \"4MB/s\"\ndisabled = true\n")
	root := filepath.Join(base, "root")
	for i := range files {
		writeAged(t, filepath.Join(root, strconv.Itoa(i)), uint64(100+i), size)
	}
	// A short data window (the daemon's test seam), waited out, so the
	// records are trusted after the unclean end.
	const window = 2 * time.Second
	shortWindow := annexdRun{base: base, roots: []string{root},
		env: func(env []string) []string { return append(env, "ANNEXD_TEST_DATA_WINDOW="+window.String()) }}
	d := spawn(t, shortWindow)
	d.waitIdle()
	time.Sleep(window + time.Second)

	if r := d.ctl("", "audit", "run"); r.code != 0 {
		t.Fatalf("audit run: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	var seen api.AuditStatus
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		seen = auditStatus(t, d)
		if seen.Pass != nil && seen.Pass.Done >= files/4 {
			break
		}
		if time.Now().After(deadline) || seen.LastPass != nil {
			t.Fatalf("the pass did not get a quarter done: %+v", seen)
		}
	}
	d.exited = true
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.done

	d = spawn(t, shortWindow)
	d.waitIdle()
	resumed := auditStatus(t, d)
	if resumed.Pass == nil || resumed.Pass.ID != seen.Pass.ID || resumed.Pass.Done < seen.Pass.Done ||
		resumed.Pass.Done >= files {
		t.Fatalf("after the restart: pass %+v; before the kill %+v", resumed.Pass, seen.Pass)
	}
	code, run := auditRun(t, d, "--full-speed")
	if code != 0 || run.StoppedBy != api.AuditDone || len(run.Counts) != 1 || run.Counts["ok"] != files-resumed.Pass.Done {
		t.Fatalf("run after the restart: exit %d, %+v; %d files were done before\n%s", code, run, resumed.Pass.Done, d.log)
	}
	st := auditStatus(t, d)
	if st.Pass != nil || st.LastPass == nil || st.LastPass.ID != seen.Pass.ID || st.LastPass.Counts["ok"] != files ||
		len(st.LastPass.Counts) != 1 || st.LastPass.Files != files {
		t.Fatalf("the pass after it ended: %+v, in progress %+v", st.LastPass, st.Pass)
	}
	t.Logf("killed with %d files verified (%d once restarted); the run after verified %d", seen.Pass.Done, resumed.Pass.Done, run.Counts["ok"])
}

// A file found corrupt and then made unreadable stays listed: the indexer
// sees the chmod and records the file unreadable with the record the
// finding was filed against, so the finding is not dropped as stale. The
// next run re-tries it: unreadable, exit 5, the recorded digest the old one.
func TestAuditCorruptThenUnreadable(t *testing.T) {
	t.Parallel()
	needRoot(t, "run annexd as uid 65534")
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := fs.Path("home")
	victim := filepath.Join(root, "photo.jpg")
	writeAged(t, victim, 84, 256<<10)
	base := dedupBase(t, auditConf)
	giveToNobody(t, base, root, victim)
	// The mount point's parents are t.TempDir's, which only root enters.
	for dir := fs.Path(); dir != os.TempDir() && dir != "/"; dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := startAs(t, base, nobody, root)
	oldKey := lookupJSON(t, d, victim)["key"].(string)
	fs.Sync(t)
	fs.FlipByte(t, victim, 1000)
	if r := ctlAs(t, d, nobody, "audit", "run", "--wait"); r.code != 4 {
		t.Fatalf("audit run after the flip: exit %d %q %q\n%s", r.code, r.stdout, r.stderr, d.log)
	}

	if err := os.Chmod(victim, 0); err != nil {
		t.Fatal(err)
	}
	waitIndexedUnreadable(t, d, victim)
	if ps := auditProblems(t, d); len(ps) != 1 || ps[0]["path"] != victim || ps[0]["state"] != "corrupt" {
		t.Fatalf("problems once unreadable: %v", ps)
	}
	d.waitIdle()
	if r := ctlAs(t, d, nobody, "audit", "run", "--wait"); r.code != 5 {
		t.Fatalf("audit run once unreadable: exit %d %q %q\n%s", r.code, r.stdout, r.stderr, d.log)
	}
	ps := auditProblems(t, d)
	if len(ps) != 1 || ps[0]["state"] != "unreadable" || !strings.Contains(oldKey, "--"+ps[0]["recorded"].(string)) {
		t.Fatalf("problems after the run: %v; key before the flip %s", ps, oldKey)
	}

	// Readable again, the flipped bytes are still not the file's content:
	// no write was seen, so the record is not re-keyed to them.
	if err := os.Chmod(victim, 0o644); err != nil {
		t.Fatal(err)
	}
	d.waitIdle()
	if l := lookupJSON(t, d, victim); l["state"] != "corrupt" || l["key"] != oldKey {
		t.Fatalf("lookup once readable again: %v, want corrupt with the key before the flip %s\n%s", l, oldKey, d.log)
	}
	if r := ctlAs(t, d, nobody, "audit", "run", "--wait"); r.code != 4 {
		t.Fatalf("audit run once readable again: exit %d %q %q\n%s", r.code, r.stdout, r.stderr, d.log)
	}
	if ps := auditProblems(t, d); len(ps) != 1 || ps[0]["state"] != "corrupt" {
		t.Fatalf("problems once readable again: %v", ps)
	}
}

// A full-speed audit by a daemon whose calibration picked a multi-buffer
// kernel hashes the large files in its lanes (it says so), with the
// digests of crypto/sha256: the untouched files are OK and the one with a
// byte flipped on the device is corrupt, its observed digest that of the
// bytes on disk.
func TestAuditFullSpeedInLanes(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := fs.Path("home")
	var paths []string
	for i := range 6 {
		p := filepath.Join(root, fmt.Sprintf("video%d.bin", i))
		writeAged(t, p, uint64(70+i), 2<<20+i*4096+100)
		paths = append(paths, p)
	}
	base := dedupBase(t, auditConf)
	d := spawn(t, annexdRun{base: base, roots: []string{root}, calibrate: true,
		env: func(env []string) []string { return append(env, "ANNEXD_TEST_CALIBRATION_BUDGET=1m") }})
	d.waitIdle()
	if m := regexp.MustCompile(`batch_kernel=(\S*)`).FindStringSubmatch(d.log.String()); m == nil || m[1] == "" || m[1] == `""` {
		t.Skipf("the calibration picked no multi-buffer kernel on this CPU:\n%s", d.log)
	}
	victim := paths[3]
	fs.Sync(t)
	fs.FlipByte(t, victim, 1<<20+77)
	code, run := auditRun(t, d, "--full-speed")
	if code != 4 || run.Counts["corrupt"] != 1 || run.Counts["ok"] != int64(len(paths)-1) || run.StoppedBy != api.AuditDone {
		t.Fatalf("audit run: exit %d, %+v\n%s", code, run, d.log)
	}
	if !strings.Contains(d.log.String(), "hashing large SHA-256 files in the lanes") {
		t.Errorf("the full-speed audit did not hash in the lanes:\n%s", d.log)
	}
	ps := auditProblems(t, d)
	data, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	now := sha256.Sum256(data)
	if len(ps) != 1 || ps[0]["path"] != victim || ps[0]["state"] != "corrupt" || ps[0]["observed"] != hex.EncodeToString(now[:]) {
		t.Fatalf("problems %v; want %s corrupt, observed %x", ps, victim, now)
	}
}
