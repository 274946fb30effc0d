package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/loopfs"
)

// Rot in a file nobody touched must never become its key, whatever else
// happens around it. The files rot on an ext4 image, behind the file
// system's back (loopfs.FlipByte): stat, ctime included, stays as it was.

// rotImage is an ext4 image with the root home on it.
func rotImage(t *testing.T) (*loopfs.FS, string) {
	t.Helper()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	return fs, fs.Path("home")
}

// rot flips a byte of each path in the image.
func rot(t *testing.T, fs *loopfs.FS, paths ...string) {
	t.Helper()
	fs.Sync(t)
	for _, p := range paths {
		fs.FlipByte(t, p, 100)
	}
}

// auditFindsOneCorrupt runs a full-speed audit and fails unless it exits
// 4 with one file found corrupt.
func auditFindsOneCorrupt(t *testing.T, d *daemon) {
	t.Helper()
	if code, run := auditRun(t, d, "--full-speed"); code != 4 || run.Counts["corrupt"] != 1 {
		t.Fatalf("audit run: exit %d, %+v; want one file corrupt\n%s", code, run, d.log)
	}
}

// rottenFirst writes each of names under a fresh image's root (64 KiB,
// aged, from seed on), starts annexd on it, rots the first and lets a
// full-speed audit find it corrupt. It returns the root, the daemon's base
// (to start it again), the daemon and the rotten file's key.
func rottenFirst(t *testing.T, seed uint64, names ...string) (root, base string, d *daemon, key string) {
	t.Helper()
	fs, root := rotImage(t)
	for i, n := range names {
		writeAged(t, filepath.Join(root, n), seed+uint64(i), 64<<10)
	}
	base = dedupBase(t, auditConf)
	d = startOn(t, base, root)
	first := filepath.Join(root, names[0])
	key = lookupJSON(t, d, first)["key"].(string)
	rot(t, fs, first)
	auditFindsOneCorrupt(t, d)
	return root, base, d, key
}

// sumOf is the hex SHA-256 of the file at path now.
func sumOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// wantKept fails unless lookup of path says state (corrupt or untraced,
// as the finding) with key: the recorded key is kept, never the digest of
// the bytes that changed without a witness.
func wantKept(t *testing.T, d *daemon, path, state, key string) {
	t.Helper()
	if l := lookupJSON(t, d, path); l["state"] != state || l["key"] != key {
		t.Errorf("lookup %s: %v; want %s with the key before the change, %s", path, l, state, key)
	}
}

// problemStates returns audit problems as path → state, and fails unless
// audit status counts exactly as many.
func problemStates(t *testing.T, d *daemon) map[string]string {
	t.Helper()
	out := map[string]string{}
	ps := auditProblems(t, d)
	for _, p := range ps {
		out[p["path"].(string)] = p["state"].(string)
	}
	if st := auditStatus(t, d); st.Problems != int64(len(ps)) {
		t.Errorf("audit status counts %d problems, audit problems lists %d: %v", st.Problems, len(ps), out)
	}
	return out
}

// wantProblems fails unless audit problems lists exactly want (path →
// state), and audit status counts as many.
func wantProblems(t *testing.T, d *daemon, want map[string]string) {
	t.Helper()
	got := problemStates(t, d)
	if len(got) != len(want) {
		t.Errorf("problems %v, want %v", got, want)
		return
	}
	for p, s := range want {
		if got[p] != s {
			t.Errorf("problems %v, want %v", got, want)
			return
		}
	}
}

func sh(t *testing.T, script string) {
	t.Helper()
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("sh -c %q: %v: %s", script, err, out)
	}
}

// Writes elsewhere in the tree leave the ledger unsure about other files:
// a write whose file was gone before the watcher could stat it, a sed -i
// beside the rotten file, the rotten file's folder renamed away and back.
// None of that is a write to the rotten files: the audit finds each
// corrupt (exit 4) and keeps its key, and a file flagged before the
// activity stays flagged.
func TestRotUnderActivityElsewhere(t *testing.T) {
	t.Parallel()
	fs, root := rotImage(t)
	beside, sibling := filepath.Join(root, "a", "beside.bin"), filepath.Join(root, "a", "sibling.txt")
	moved := filepath.Join(root, "b", "sub", "moved.bin")
	flagged := filepath.Join(root, "c", "flagged.bin")
	for i, p := range []string{beside, moved, flagged} {
		writeAged(t, p, uint64(300+i), 64<<10)
	}
	write(t, sibling, "one line\n")
	if err := os.MkdirAll(filepath.Join(root, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := startOn(t, dedupBase(t, auditConf), root)
	keys := map[string]string{}
	for _, p := range []string{beside, moved, flagged} {
		keys[p] = lookupJSON(t, d, p)["key"].(string)
	}
	rot(t, fs, flagged)
	if code, run := auditRun(t, d, "--full-speed", flagged); code != 4 || run.Counts["corrupt"] != 1 {
		t.Fatalf("audit of the flagged file: exit %d, %+v\n%s", code, run, d.log)
	}
	rot(t, fs, beside, moved)

	sh(t, "cd "+root+" && echo x > other/t && rm other/t && echo x > a/t && rm a/t && echo x > c/t && rm c/t")
	sh(t, "sed -i s/one/two/ "+sibling)
	sh(t, "cd "+root+" && mv b b2 && mv b2 b")
	d.waitIdle()

	code, run := auditRun(t, d, "--full-speed")
	if code != 4 || run.Counts["corrupt"] != 3 {
		t.Errorf("audit run: exit %d, %+v; want exit 4 with the three rotten files corrupt\n%s", code, run, d.log)
	}
	for p, k := range keys {
		wantKept(t, d, p, "corrupt", k)
	}
	wantProblems(t, d, map[string]string{beside: "corrupt", moved: "corrupt", flagged: "corrupt"})
	if l := lookupJSON(t, d, sibling); l["state"] != "current" || !strings.Contains(l["key"].(string), sumOf(t, sibling)) {
		t.Errorf("the sed -i edit: %v", l)
	}
}

// A chmod, a chown, an extended attribute or a new hard link moves only a
// file's ctime. On a rotten file nobody wrote, the indexer hashes it again
// on that ctime and must not record the rotten digest: the file keeps its
// key and is listed as changed without a trace (untraced), as is the new
// link's name. The audit's run then exits 6, and an accept takes the bytes.
func TestRotMetadataChange(t *testing.T) {
	t.Parallel()
	fs, root := rotImage(t)
	names := []string{"chmod.bin", "chown.bin", "xattr.bin", "linked.bin"}
	var paths []string
	for i, n := range names {
		p := filepath.Join(root, n)
		writeAged(t, p, uint64(320+i), 64<<10)
		paths = append(paths, p)
	}
	link := filepath.Join(root, "link.bin")
	d := startOn(t, dedupBase(t, auditConf), root)
	keys := map[string]string{}
	for _, p := range paths {
		keys[p] = lookupJSON(t, d, p)["key"].(string)
	}
	rot(t, fs, paths...)
	for _, err := range []error{
		os.Chmod(paths[0], 0o600),
		os.Chown(paths[1], 65534, 65534),
		unix.Setxattr(paths[2], "user.annexd-test", []byte("x"), 0),
		os.Link(paths[3], link),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	d.waitIdle()
	for _, p := range paths {
		wantKept(t, d, p, "untraced", keys[p])
	}
	linkKey := strings.Replace(keys[paths[3]], "linked.bin", "link.bin", 1)
	if l := lookupJSON(t, d, link); l["state"] == "current" {
		t.Errorf("lookup of the new link: %v; the rotten bytes became its key (the inode's is %s)", l, linkKey)
	}
	want := map[string]string{link: "untraced"}
	for _, p := range paths {
		want[p] = "untraced"
	}
	wantProblems(t, d, want)

	code, run := auditRun(t, d, "--full-speed")
	if code != 6 || run.Counts["untraced"] != 5 || run.Counts["corrupt"] != 0 {
		t.Errorf("audit run: exit %d, %+v; want exit 6, five untraced\n%s", code, run, d.log)
	}
	wantProblems(t, d, want)
	if r := d.ctl("", "audit", "accept", paths[0]); r.code != 0 {
		t.Fatalf("accept: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if l := lookupJSON(t, d, paths[0]); l["state"] != "current" || !strings.Contains(l["key"].(string), sumOf(t, paths[0])) {
		t.Errorf("lookup once accepted: %v", l)
	}
	delete(want, paths[0])
	wantProblems(t, d, want)
}

// A flagged file's finding follows it through renames of the file and of
// its folder, made while the daemon runs and while it is stopped, and
// survives clean and unclean restarts, listed under its path now, until
// it is accepted.
func TestRotFindingFollowsRenames(t *testing.T) {
	t.Parallel()
	root, base, d, key := rottenFirst(t, 340, "d/photo.jpg", "d/fine.jpg")
	victim := filepath.Join(root, "d", "photo.jpg")
	at := victim
	move := func(from, to string) {
		t.Helper()
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string) {
		t.Helper()
		d.waitIdle()
		keyNow := strings.Replace(key, "photo.jpg", filepath.Base(at), 1)
		if l := lookupJSON(t, d, at); l["state"] != "corrupt" || l["key"] != keyNow {
			t.Errorf("%s: lookup %s: %v; want corrupt with %s\n%s", what, at, l, keyNow, d.log)
		}
		wantProblems(t, d, map[string]string{at: "corrupt"})
	}

	at = filepath.Join(root, "d", "renamed.jpg")
	move(victim, at)
	check("the file renamed while running")
	move(filepath.Join(root, "d"), filepath.Join(root, "e"))
	at = filepath.Join(root, "e", "renamed.jpg")
	check("its folder renamed while running")

	d.stop()
	move(at, filepath.Join(root, "e", "again.jpg"))
	at = filepath.Join(root, "e", "again.jpg")
	d = startOn(t, base, root)
	check("the file renamed while stopped")
	d.stop()
	move(filepath.Join(root, "e"), filepath.Join(root, "f"))
	at = filepath.Join(root, "f", "again.jpg")
	d = startOn(t, base, root)
	check("its folder renamed while stopped")
	for i := range 2 {
		kill(t, d)
		d = startOn(t, base, root)
		check("unclean restart " + string(rune('1'+i)))
	}
	if code, run := auditRun(t, d, "--full-speed"); code != 4 || run.Counts["corrupt"] != 1 {
		t.Errorf("audit run after the renames: exit %d, %+v\n%s", code, run, d.log)
	}
	wantProblems(t, d, map[string]string{at: "corrupt"})
	if r := d.ctl("", "audit", "accept", at); r.code != 0 {
		t.Fatalf("accept: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	wantProblems(t, d, map[string]string{})
	if l := lookupJSON(t, d, at); l["state"] != "current" || !strings.Contains(l["key"].(string), sumOf(t, at)) {
		t.Errorf("lookup once accepted: %v", l)
	}
}

// A rotten file swaps names, again and again, with files that two
// writers append to every few milliseconds, through their open
// descriptors. A write is named by the path it went through; when the
// watcher reads it after a swap, the path holds the rotten file. Such a
// write must never pass for an edit of the rotten file: it stays corrupt
// with its key after every swap, and the written files are current with
// their bytes once the writers stop.
func TestRotSwappedWithFilesBeingWritten(t *testing.T) {
	t.Parallel()
	root, _, d, key := rottenFirst(t, 1400, "a.bin", "b.bin", "c.bin")
	paths := []string{filepath.Join(root, "a.bin"), filepath.Join(root, "b.bin"), filepath.Join(root, "c.bin")}
	var st unix.Stat_t // the rotten file's inode
	if err := unix.Stat(paths[0], &st); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var writers sync.WaitGroup
	for _, p := range paths[1:] {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		writers.Go(func() {
			defer f.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(3 * time.Millisecond):
				}
				if _, err := fmt.Fprintf(f, "line %d\n", i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	rotten := func() string { // where the rotten inode is now
		for _, p := range paths {
			var now unix.Stat_t
			if unix.Stat(p, &now) == nil && now.Ino == st.Ino {
				return p
			}
		}
		t.Fatal("the rotten file is gone")
		return ""
	}
	tmp := filepath.Join(root, ".swap")
	for i := range 20 {
		a, b := paths[0], paths[1+i%2]
		for _, mv := range [][2]string{{a, tmp}, {b, a}, {tmp, b}} {
			if err := os.Rename(mv[0], mv[1]); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Duration(50+i*20) * time.Millisecond)
		at := rotten()
		if l := lookupJSON(t, d, at); l["state"] == "current" {
			t.Errorf("swap %d: the rotten file at %s is current: %v; want corrupt with %s", i, filepath.Base(at), l, key)
		}
	}
	close(stop)
	writers.Wait()
	d.waitIdle()
	at := rotten()
	wantKept(t, d, at, "corrupt", key) // the names share the extension of the key
	for _, p := range paths {
		if p == at {
			continue
		}
		if l := lookupJSON(t, d, p); l["state"] != "current" || !strings.Contains(l["key"].(string), sumOf(t, p)) {
			t.Errorf("a written file: lookup %s: %v; want current with its bytes' key", p, l)
		}
	}
	wantProblems(t, d, map[string]string{at: "corrupt"})
}

// A temporary file is written and removed at once, before the watcher
// can stat it: the write is known by its path alone. A rotten file
// renamed onto that name a moment later was not there when it was
// written: it stays corrupt with its key, try after try.
func TestRotRenamedOntoATempFilesName(t *testing.T) {
	t.Parallel()
	root, _, d, key := rottenFirst(t, 5331, "r.bin")
	at := filepath.Join(root, "r.bin")
	for i := range 5 {
		tmp := filepath.Join(root, fmt.Sprintf("t%d.bin", i))
		f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("temp\n"); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(tmp); err != nil {
			t.Fatal(err)
		}
		f.Close()
		time.Sleep(300 * time.Millisecond)
		if err := os.Rename(at, tmp); err != nil {
			t.Fatal(err)
		}
		at = tmp
		d.waitIdle()
		if l := lookupJSON(t, d, at); l["state"] != "corrupt" || l["key"] != key {
			t.Fatalf("try %d: the rotten file renamed to %s: %v; want corrupt with %s\n%s", i, filepath.Base(at), l, key, d.log)
		}
	}
	wantProblems(t, d, map[string]string{at: "corrupt"})
}

// A file whose mtime lies in the future (touch -d, a tar made where the
// clock ran ahead, a camera's wrong clock) is no racily clean record for
// ever: its ctime says when it last changed. Its rot is found by the audit
// and kept at a restart (on another loop device), never taken for an edit,
// and a restart hashes nothing again. (Before, the audit took the rot for
// an edit of a racily clean record and recorded the rotten bytes' key, and
// every start hashed such files again, taking rot made while the daemon
// was down for the truth.)
func TestRotOfAFileWithAFutureMtime(t *testing.T) {
	t.Parallel()
	onExt4AndXFS(t, 53, func(t *testing.T, fs *loopfs.FS, root string, files []string) {
		future := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, p := range files[:2] {
			if err := os.Chtimes(p, future, future); err != nil {
				t.Fatal(err)
			}
		}
		base := dedupBase(t, auditConf)
		d := startOn(t, base, root)
		keys := keysOf(t, d, files)

		// Rot under the running daemon, found by the audit.
		rot(t, fs, files[0])
		code, run := auditRun(t, d, "--full-speed")
		if code != 4 || run.Counts["corrupt"] != 1 {
			t.Errorf("audit of a rotten file with a future mtime: exit %d, %+v; want exit 4, one corrupt", code, run)
		}
		if l := lookupJSON(t, d, files[0]); l["state"] != "corrupt" || l["key"] != keys[files[0]] {
			t.Errorf("the rotten file %s: %v; want corrupt with the key before the rot, %s", files[0], l, keys[files[0]])
		}

		// Rot while the daemon is down, the image on another loop device.
		d.stop()
		fs.Renumber(t)
		fs.FlipByte(t, files[1], 100)
		d = startOn(t, base, root)
		if st := statusJSON(t, d); st.Scan.FilesHashed != 0 {
			t.Errorf("after a restart %d files were hashed again; want 0 (nothing changed but rot)", st.Scan.FilesHashed)
		}
		if l := lookupJSON(t, d, files[1]); l["key"] != keys[files[1]] {
			t.Errorf("the file rotten while annexd was down, %s: %v; want its key from before, %s", files[1], l, keys[files[1]])
		}
		code, run = auditRun(t, d, "--full-speed")
		if code != 4 || run.Counts["corrupt"] < 1 {
			t.Errorf("audit after the restart: exit %d, %+v; want exit 4", code, run)
		}
		wantProblems(t, d, map[string]string{files[0]: "corrupt", files[1]: "corrupt"})
	})
}

// A file copied with its mtime kept (cp -p, rsync -t, tar x, touch -r
// after a write) has an old mtime and a fresh ctime. A second same-size
// copy with the same mtime, made in the first one's ctime tick (1 s on
// ext4 with 128-byte inodes) while annexd is down, leaves size, mtime and
// ctime as recorded: only the ctime can tell that such a write may hide,
// so the record of the first copy must be racily clean by its ctime, and
// the restart must hash the file again. (By the mtime alone, lookup said
// current with the first copy's key, and the audit called the edit
// corrupt.)
func TestEditInTheCtimeTickOfItsHashWithTheMtimeSetBack(t *testing.T) {
	t.Parallel()
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	editInItsHashSecond(t, "a copy with its mtime kept", 0, func(t *testing.T, f string, seed uint64) {
		writeRandom(t, f, seed, 4000) // a cp -p: new bytes, the source's mtime
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	})
}

// On ext4 with 128-byte inodes the timestamps have whole seconds. A file
// hashed 200 ms into its ctime's second and rewritten with the same size in
// that same second, while annexd is down, keeps size, mtime and ctime: its
// record must be racily clean by a tick of a second (fsstat.Granularity),
// and the restart hash it again. (With the 100 ms tick of nanosecond file
// systems, lookup said current with the old key and the audit called the
// edit corrupt.)
func TestEditInTheSecondOfItsHashOnWholeSecondTimestamps(t *testing.T) {
	t.Parallel()
	// The ctime second is 200 ms old at the hash: past the 100 ms tick.
	editInItsHashSecond(t, "a plain same-size rewrite", 200*time.Millisecond, func(t *testing.T, f string, seed uint64) {
		writeRandom(t, f, seed, 4000)
	})
}

// editInItsHashSecond, on ext4 with 128-byte inodes (whole-second
// timestamps), writes a file with put, has annexd hash it (lookup --wait,
// wait after the write), stops annexd and writes the file again with put,
// until the second write lands in the first one's ctime second; then
// restarts annexd and fails when lookup says current with a key of other
// bytes or the audit takes the edit (what) for rot. The lookup, the stop
// and the rewrite must fit in one second: on a loaded machine (the test
// command runs packages side by side) most attempts miss it, so it tries
// up to 30 times.
func editInItsHashSecond(t *testing.T, what string, wait time.Duration, put func(t *testing.T, f string, seed uint64)) {
	needRoot(t, "mount loop images")
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20, MkfsArgs: []string{"-I", "128"}})
	root := fs.Path("home")
	writeAged(t, filepath.Join(root, "other"), 1, 4096)
	f := filepath.Join(root, "f")
	ctime := func() int64 {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(f, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ctim.Sec
	}
	base := dedupBase(t, auditConf)
	d := startOn(t, base, root)
	for attempt := 0; ; attempt++ {
		if attempt == 30 {
			t.Fatalf("never made the second write in the first one's ctime second in %d attempts", attempt)
		}
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 10*time.Millisecond)))
		put(t, f, 100+uint64(attempt))
		c1 := ctime()
		time.Sleep(wait)
		if r := d.ctl("", "lookup", "--wait", f); r.code != 0 { // hashed on demand
			t.Fatalf("lookup --wait of the first version: exit %d %q %q", r.code, r.stdout, r.stderr)
		}
		d.stop()
		put(t, f, 200+uint64(attempt))
		if ctime() == c1 {
			break
		}
		d = startOn(t, base, root)
	}
	sum := sumOf(t, f)
	d = startOn(t, base, root)
	if l := lookupJSON(t, d, f); l["state"] == "current" && !strings.HasSuffix(l["key"].(string), sum) {
		t.Errorf("lookup of the file rewritten in the second of its hash while annexd was down: %v; its bytes are %s (a wrong key)", l, sum)
	}
	if code, run := auditRun(t, d, "--full-speed"); code == 4 || run.Counts["corrupt"] != 0 {
		t.Errorf("audit: exit %d, %+v; %s taken for rot", code, run, what)
	}
}

// A file the audit found corrupt (it reads the device) whose good bytes the
// page cache still holds keeps its finding when the indexer hashes it
// again, after a chmod or a move out of the roots and back: the hash reads
// the device too. (Through the page cache it gave the recorded digest
// back: the file went current with a key the disk no longer holds.)
func TestFlaggedFileRehashedWithItsGoodBytesCached(t *testing.T) {
	t.Parallel()
	needRoot(t, "mount loop images")
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	root := fs.Path("home")
	chmodded := filepath.Join(root, "chmodded")
	moved := filepath.Join(root, "moved")
	out := fs.Path("outside")
	for i, p := range []string{chmodded, moved, filepath.Join(root, "other")} {
		writeAged(t, p, 70+uint64(i), 64<<10)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	base := dedupBase(t, auditConf)
	d := startOn(t, base, root)
	keys := map[string]string{}
	for _, p := range []string{chmodded, moved} {
		keys[p] = lookupJSON(t, d, p)["key"].(string)
		if _, err := os.ReadFile(p); err != nil { // its good pages in the cache
			t.Fatal(err)
		}
	}
	fs.Sync(t)
	fs.FlipByteUnderCache(t, chmodded, 100)
	fs.FlipByteUnderCache(t, moved, 100)
	if code, run := auditRun(t, d, "--full-speed"); code != 4 || run.Counts["corrupt"] != 2 {
		t.Fatalf("audit run: exit %d, %+v; want two files corrupt", code, run)
	}
	if err := os.Chmod(chmodded, 0o600); err != nil {
		t.Fatal(err)
	}
	away := filepath.Join(out, "moved")
	if err := os.Rename(moved, away); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := os.Rename(away, moved); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	for _, p := range []string{chmodded, moved} {
		l := lookupJSON(t, d, p)
		disk := directSum(t, p)
		if l["state"] == "current" && !strings.HasSuffix(l["key"].(string), hex.EncodeToString(disk[:])) {
			t.Errorf("%s: %v after its finding; the device holds bytes of digest %x (the rot), the key is the one the audit found rotten (%s)",
				filepath.Base(p), l, disk, keys[p])
		}
	}
}

// kill ends d with SIGKILL: an unclean end.
func kill(t *testing.T, d *daemon) {
	t.Helper()
	d.exited = true
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.done
}

// A lost write (a same-size rewrite hashed from the page cache, whose
// bytes never reached the disk before an unclean end) stays listed
// through further unclean restarts, which hash the file again, and audit
// status counts what audit problems lists.
func TestLostWriteSurvivesUncleanRestarts(t *testing.T) {
	t.Parallel()
	fs, root := rotImage(t)
	victim := filepath.Join(root, "doc.bin")
	writeAged(t, victim, 350, 64<<10)
	base := dedupBase(t, auditConf)
	d := startOn(t, base, root)
	old, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	writeAged(t, victim, 351, 64<<10) // the rewrite the power cut will lose
	d.waitIdle()
	written := sumOf(t, victim)
	if l := lookupJSON(t, d, victim); l["state"] != "current" || !strings.Contains(l["key"].(string), written) {
		t.Fatalf("lookup of the rewrite: %v", l)
	}
	kill(t, d)
	fs.WriteBehind(t, victim, old) // the disk kept the bytes before it
	fs.Unmount(t)                  // and the power cut ended its mount
	fs.Mount(t)
	d = startOn(t, base, root)
	for i := range 3 {
		d.waitIdle()
		wantProblems(t, d, map[string]string{victim: "lost_write"})
		if l := lookupJSON(t, d, victim); l["state"] != "current" || strings.Contains(l["key"].(string), written) {
			t.Errorf("restart %d: lookup %v; want the key of the bytes on disk", i, l)
		}
		if i < 2 {
			kill(t, d)
			d = startOn(t, base, root)
		}
	}
	if r := d.ctl("", "audit", "accept", victim); r.code != 0 {
		t.Fatalf("accept: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	wantProblems(t, d, map[string]string{})
}

// Rot made while annexd was down after a SIGKILL is rot, also in a file
// hashed just before the kill: only the process died, so the page cache
// kept every write it hashed, and the file system's mount stayed up. The
// audit lists the file corrupt and lookup keeps the key. Unmounting and
// mounting the disk before the start (a disk pulled out and put back)
// makes the same change a lost write: the mount's end may have lost
// writes the daemon hashed from the page cache.
func TestRotWhileKilledIsRot(t *testing.T) {
	t.Parallel()
	for _, remount := range []bool{false, true} {
		fs, root := rotImage(t)
		victim := filepath.Join(root, "doc.bin")
		writeAged(t, victim, 380, 64<<10)
		base := dedupBase(t, auditConf)
		d := startOn(t, base, root)
		hashed := lookupJSON(t, d, victim)["key"].(string)
		kill(t, d)
		rot(t, fs, victim)
		want, keyWanted := "corrupt", hashed
		if remount {
			fs.Unmount(t)
			fs.Mount(t)
			want, keyWanted = "lost_write", sumOf(t, victim)
		}
		d = startOn(t, base, root)
		if l := lookupJSON(t, d, victim); l["state"] != "current" || !strings.Contains(l["key"].(string), keyWanted) {
			t.Errorf("remount %v: lookup %v; want current with %s", remount, l, keyWanted)
		}
		auditRun(t, d, "--full-speed")
		wantProblems(t, d, map[string]string{victim: want})
		d.stop()
	}
}

// Rewrites that put the mtime back are edits when the daemon sees them:
// rsync --inplace -t, and a truncate and rewrite of the same size with the
// mtime restored, made while it runs, give the files their new keys. The
// same rewrite made while the daemon was down left no trace: the file
// keeps its key, listed as untraced (audit run exits 6), until the user
// accepts the new bytes.
func TestRewriteKeepingMtime(t *testing.T) {
	t.Parallel()
	base := dedupBase(t, auditConf)
	root := filepath.Join(base, "root")
	rsynced, truncated, down := filepath.Join(root, "rsynced.bin"), filepath.Join(root, "truncated.bin"), filepath.Join(root, "down.bin")
	for i, p := range []string{rsynced, truncated, down} {
		writeAged(t, p, uint64(360+i), 32<<10)
	}
	d := startOn(t, base, root)
	mtimeOf := func(p string) time.Time {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime()
	}
	// rsync's source: other bytes of the same size, with the same mtime.
	src := filepath.Join(base, "src.bin")
	writeRandom(t, src, 370, 32<<10)
	if err := os.Chtimes(src, mtimeOf(rsynced), mtimeOf(rsynced)); err != nil {
		t.Fatal(err)
	}
	sh(t, "rsync --inplace -t -I "+src+" "+rsynced)
	m := mtimeOf(truncated)
	sh(t, "truncate -s 0 "+truncated+" && head -c 32768 /dev/urandom > "+truncated)
	if err := os.Chtimes(truncated, m, m); err != nil {
		t.Fatal(err)
	}
	d.waitIdle()
	for _, p := range []string{rsynced, truncated} {
		if l := lookupJSON(t, d, p); l["state"] != "current" || !strings.Contains(l["key"].(string), sumOf(t, p)) {
			t.Errorf("lookup %s after a rewrite seen: %v; want current with the new key", p, l)
		}
	}
	wantProblems(t, d, map[string]string{})

	key := lookupJSON(t, d, down)["key"].(string)
	orig, err := os.ReadFile(down)
	if err != nil {
		t.Fatal(err)
	}
	writeAged(t, filepath.Join(root, "down-copy.bin"), 0, 0)
	if err := os.WriteFile(filepath.Join(root, "down-copy.bin"), orig, 0o644); err != nil {
		t.Fatal(err)
	}
	d.waitIdle()
	d.stop()
	m = mtimeOf(down)
	writeRandom(t, down, 371, 32<<10)
	if err := os.Chtimes(down, m, m); err != nil {
		t.Fatal(err)
	}
	edit, err := os.ReadFile(down)
	if err != nil {
		t.Fatal(err)
	}
	d = startOn(t, base, root)
	wantKept(t, d, down, "untraced", key)
	if r := d.ctl("", "lookup", down); r.code == 0 || !strings.Contains(r.stderr+r.stdout, "(untraced") {
		t.Errorf("lookup %s: exit %d %q %q; want it to say untraced", down, r.code, r.stdout, r.stderr)
	}
	wantProblems(t, d, map[string]string{down: "untraced"})
	// A verified copy of the recorded bytes exists, but the new bytes
	// may be the user's: heal leaves them.
	r := d.ctl("", "audit", "heal", "--json", down)
	var healed struct {
		Files []struct{ Path, Outcome string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &healed); err != nil || len(healed.Files) != 1 || healed.Files[0].Outcome != "refused" {
		t.Errorf("heal of an untraced file: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(down); !bytes.Equal(b, edit) {
		t.Fatal("heal replaced the bytes of a file changed without a trace")
	}
	if code, run := auditRun(t, d, "--full-speed"); code != 6 || run.Counts["untraced"] != 1 {
		t.Errorf("audit run: exit %d, %+v; want exit 6, one untraced", code, run)
	}
	if r := d.ctl("", "audit", "accept", down); r.code != 0 {
		t.Fatalf("accept: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if l := lookupJSON(t, d, down); l["state"] != "current" || !strings.Contains(l["key"].(string), sumOf(t, down)) {
		t.Errorf("lookup once accepted: %v", l)
	}
	wantProblems(t, d, map[string]string{})
}

// Rot of a file renamed since it was hashed (found by an outside attack
// in stop 54): the indexer takes the rename over as a move, and the
// record gets the ctime the rename set, later than its hashing. Taken for
// a racily clean record, the rot was called an edit and became the key,
// current, listed nowhere. And a lookup that came before the indexer knew
// of the rename hashed the file as a new one, its rot the key. Renamed in
// its folder and into another, a rotten file is found corrupt at its new
// name with the digest from before, and no lookup hashes it again.
func TestRotOfARenamedFile(t *testing.T) {
	t.Parallel()
	onExt4AndXFS(t, 54, func(t *testing.T, fs *loopfs.FS, root string, files []string) {
		if err := os.MkdirAll(filepath.Join(root, "elsewhere"), 0o755); err != nil {
			t.Fatal(err)
		}
		d := startOn(t, dedupBase(t, auditConf), root)
		keys := keysOf(t, d, files)
		rot(t, fs, files[0], files[1])
		hashed := statusJSON(t, d).Scan.FilesHashed
		// The renames' ctimes past the second of the hashing: on a file
		// system of whole-second timestamps a rename in that second
		// leaves a ctime no later than the hashing, racily clean.
		time.Sleep(fsstat.SafeGranularity + 100*time.Millisecond)
		moved := map[string]string{files[0] + ".moved": files[0], filepath.Join(root, "elsewhere", "b"): files[1]}
		for to, from := range moved {
			if err := os.Rename(from, to); err != nil {
				t.Fatal(err)
			}
			// At once, before the watcher has told the indexer.
			if l := lookupJSON(t, d, to); l["state"] != "pending" && keyDigest(l["key"]) != keyDigest(keys[from]) {
				t.Errorf("lookup of %s right after its rename from %s: %v; want pending or the digest from before, %s", to, from, l, keys[from])
			}
		}
		time.Sleep(200 * time.Millisecond) // the watcher reads the events
		d.waitIdle()
		for to, from := range moved {
			if l := lookupJSON(t, d, to); keyDigest(l["key"]) != keyDigest(keys[from]) {
				t.Errorf("lookup of %s, renamed from %s: %v; want the digest from before, %s", to, from, l, keys[from])
			}
		}
		if n := statusJSON(t, d).Scan.FilesHashed - hashed; n != 0 {
			t.Errorf("%d renamed files hashed again; want none", n)
		}
		code, run := auditRun(t, d, "--full-speed")
		if code != 4 || run.Counts["corrupt"] != 2 {
			t.Errorf("audit of two rotten renamed files: exit %d, %+v; want exit 4, two corrupt", code, run)
		}
		want := map[string]string{}
		for to, from := range moved {
			if l := lookupJSON(t, d, to); l["state"] != "corrupt" || keyDigest(l["key"]) != keyDigest(keys[from]) {
				t.Errorf("the rotten file %s: %v; want corrupt with the digest from before, %s", to, l, keys[from])
			}
			want[to] = "corrupt"
		}
		wantProblems(t, d, want)
	})
}

// keyDigest is the digest of a key (a lookup's "key"), without its
// extension, which a rename may change.
func keyDigest(k any) string {
	s, _ := k.(string)
	_, d, _ := strings.Cut(s, "--")
	d, _, _ = strings.Cut(d, ".")
	return d
}

// onExt4AndXFS runs fn on an ext4 and an XFS image (root: its folder
// "home", holding files, fillTree's six of seed), as subtests.
func onExt4AndXFS(t *testing.T, seed uint64, fn func(t *testing.T, fs *loopfs.FS, root string, files []string)) {
	for _, kind := range []loopfs.Kind{loopfs.Ext4, loopfs.XFS} {
		t.Run(string(kind), func(t *testing.T) {
			needRoot(t, "mount loop images")
			fs := loopfs.New(t, kind, loopfs.Options{Size: max(loopfs.MinSize[kind], 64<<20)})
			root := fs.Path("home")
			fn(t, fs, root, fillTree(t, root, 6, seed))
		})
	}
}
