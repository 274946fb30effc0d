package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/loopfs"
)

// These tests live a machine's life around the daemon: devices numbered
// anew by a reboot, file systems unmounted and mounted again under it,
// another disk where the first one was.

// waitFor polls cond every 50 ms for up to limit and returns how long it
// took, failing the test with what when it never holds.
func waitFor(t *testing.T, d *daemon, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v\n%s", what, limit, d.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// fillTree writes n aged files of 8 KiB under dir, a third of them in
// sub, and returns their paths.
func fillTree(t *testing.T, dir string, n int, seed uint64) []string {
	t.Helper()
	var out []string
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("f%03d.bin", i))
		if i%3 == 0 {
			p = filepath.Join(dir, "sub", fmt.Sprintf("f%03d.bin", i))
		}
		writeAged(t, p, seed+uint64(i), 8<<10)
		out = append(out, p)
	}
	return out
}

// keysOf returns the key lookup gives each path.
func keysOf(t *testing.T, d *daemon, paths []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range paths {
		l := lookupJSON(t, d, p)
		k, _ := l["key"].(string)
		out[p] = k
	}
	return out
}

// A reboot that numbers the devices anew: the same file system comes back
// on another loop device with another st_dev. Nothing is hashed again,
// a finding made before stays, and rot that happened while the daemon
// was down is found by the audit, not taken for the truth.
func TestRenumberedDeviceKeepsRecords(t *testing.T) {
	t.Parallel()
	needRoot(t, "mount loop images")
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := fs.Path("home")
	files := fillTree(t, root, 30, 100)
	base := dedupBase(t, auditConf)
	d := startOn(t, base, root)
	keys := keysOf(t, d, files)

	// A finding before the reboot.
	flagged := files[0]
	fs.Sync(t)
	fs.FlipByte(t, flagged, 100)
	if code, run := auditRun(t, d, "--full-speed", flagged); code != 4 || run.Counts["corrupt"] != 1 {
		t.Fatalf("audit of the flipped file: exit %d %+v", code, run)
	}
	d.stop()

	before := fs.Device
	fs.Renumber(t)
	if fs.Device == before {
		t.Fatalf("the image came back on %s again", before)
	}
	rotten := files[1:6]
	for _, p := range rotten {
		fs.FlipByte(t, p, 200)
	}

	d = startOn(t, base, root)
	if st := statusJSON(t, d); st.Scan.FilesHashed != 0 {
		t.Errorf("after renumbering %s -> %s, %d of %d files were hashed again; want 0\n%s",
			before, fs.Device, st.Scan.FilesHashed, len(files), d.log)
	}
	if l := lookupJSON(t, d, flagged); l["state"] != "corrupt" || l["key"] != keys[flagged] {
		t.Errorf("the file flagged before the reboot: %v; want corrupt with %s", l, keys[flagged])
	}
	code, run := auditRun(t, d, "--full-speed")
	if code != 4 || run.Counts["corrupt"] < int64(len(rotten)) {
		t.Errorf("audit after the reboot: exit %d %+v; want exit 4 and %d corrupt", code, run, len(rotten))
	}
	for _, p := range append([]string{flagged}, rotten...) {
		if l := lookupJSON(t, d, p); l["state"] != "corrupt" || l["key"] != keys[p] {
			t.Errorf("%s after the audit: %v; want corrupt with its key from before, %s", p, l, keys[p])
		}
	}
	for _, p := range files[6:] {
		if l := lookupJSON(t, d, p); l["state"] != "current" || l["key"] != keys[p] {
			t.Errorf("%s: %v; want current with %s", p, l, keys[p])
		}
	}
}

// A root's file system unmounted and mounted again under the running
// daemon: status says so while it is away, and once it is back the root
// is watched again with nobody asking, so files made then are indexed.
func TestRemountedRootWatchedAgain(t *testing.T) {
	t.Parallel()
	needRoot(t, "mount loop images")
	for _, tc := range []struct {
		name string
		sub  string // the root, under the mount point
	}{{"root is the mount point", ""}, {"root is a folder of the mount", "home"}} {
		t.Run(tc.name, func(t *testing.T) {
			fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
			root := fs.Path(tc.sub)
			files := fillTree(t, root, 6, 200)
			d := startOn(t, dedupBase(t, auditConf), root)
			keys := keysOf(t, d, files)

			fs.Unmount(t)
			waitFor(t, d, 10*time.Second, "status says the root is away", func() bool {
				st := statusJSON(t, d)
				return len(st.Roots) == 1 && strings.Contains(st.Roots[0].Away, "not mounted") && !st.Watcher.Healthy
			})
			if r := d.ctl("", "status"); !strings.Contains(r.stdout, "not mounted") {
				t.Errorf("status does not say the root's file system is away:\n%s", r.stdout)
			}
			fs.Mount(t)
			back := time.Now()
			var made []string
			for i, dir := range []string{root, filepath.Join(root, "sub"), filepath.Join(root, "new", "deep")} {
				for j := range 2 {
					p := filepath.Join(dir, fmt.Sprintf("made%d%d", i, j))
					write(t, p, fmt.Sprintf("made after the mount %d %d", i, j))
					made = append(made, p)
				}
			}
			waitHashed(t, d, int64(len(files)+len(made)), "files made after the mount are indexed")
			t.Logf("watched again and indexed %d new files %v after the mount", len(made), time.Since(back).Round(time.Millisecond))
			for _, p := range made {
				if l, want := lookupJSON(t, d, p), calckey(t, p); l["state"] != "current" || l["key"] != want {
					t.Errorf("%s: %v, git-annex says %s", p, l, want)
				}
			}
			for p, k := range keysOf(t, d, files) {
				if k != keys[p] {
					t.Errorf("%s: key %s, was %s", p, k, keys[p])
				}
			}
			st := statusJSON(t, d)
			if !st.Watcher.Healthy || st.Roots[0].Away != "" || !st.Roots[0].Watched {
				t.Errorf("status after the mount: %+v %+v", st.Watcher, st.Roots)
			}
			if st.Scan.FilesHashed != int64(len(files)+len(made)) {
				t.Errorf("%d files hashed in all; want %d (the first scan's and the new ones)", st.Scan.FilesHashed, len(files)+len(made))
			}
		})
	}
}

// waitHashed waits until the daemon has hashed n files since it started
// and is idle. By status, not by lookup: a lookup that beats the watcher's
// settled event hashes a new file within its mtime's tick, a record the
// racy rule does not trust, and the event hashes it again (a second hash
// the tests' counts would take for a file hashed again for nothing).
func waitHashed(t *testing.T, d *daemon, n int64, what string) {
	t.Helper()
	waitFor(t, d, 20*time.Second, what, func() bool {
		st := statusJSON(t, d)
		return st.Scan.FilesHashed >= n && st.Idle
	})
}

// Another disk mounted where the first one was, under the running daemon
// and across a restart: the second disk's files are indexed, the first
// one's records are kept aside with their findings, and they come back,
// without hashing, when the first disk is back.
func TestAnotherDiskAtTheSamePlace(t *testing.T) {
	t.Parallel()
	needRoot(t, "mount loop images")
	a := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	b := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	filesA := fillTree(t, a.Path("home"), 9, 300)
	b.Unmount(t)
	b.MountAt(t, a.Dir)
	filesB := fillTree(t, a.Path("home"), 6, 400) // same names, other bytes
	if err := syscall.Unmount(a.Dir, 0); err != nil {
		t.Fatal(err)
	}
	root := a.Path("home")
	base := dedupBase(t, auditConf)
	d := startOn(t, base, root)
	keysA := keysOf(t, d, filesA)
	flagged := filesA[2]
	a.Sync(t)
	a.FlipByte(t, flagged, 10)
	if code, _ := auditRun(t, d, "--full-speed", flagged); code != 4 {
		t.Fatalf("audit of the flipped file: exit %d", code)
	}

	// Disk b in a's place, the daemon running.
	a.Unmount(t)
	b.MountAt(t, a.Dir)
	waitFor(t, d, 20*time.Second, "disk b's files are indexed", func() bool {
		for _, p := range filesB {
			if l := lookupJSON(t, d, p); l["state"] != "current" || l["key"] != calckey(t, p) {
				return false
			}
		}
		return true
	})
	hashedB := statusJSON(t, d).Scan.FilesHashed
	away := statusJSON(t, d).Away
	if len(away) != 1 || away[0].Records != 6 || away[0].Type != "ext4" || away[0].Point != a.Dir {
		t.Errorf("status lists away %+v; want disk a's 6 records, last mounted at %s", away, a.Dir)
	}
	if r := d.ctl("", "status"); !strings.Contains(r.stdout, "6 records of ext4 uuid:") {
		t.Errorf("status does not list disk a's records:\n%s", r.stdout)
	}
	d.stop()

	// Disk a back, across a restart.
	if err := syscall.Unmount(a.Dir, 0); err != nil {
		t.Fatal(err)
	}
	a.Mount(t)
	d = startOn(t, base, root)
	if st := statusJSON(t, d); st.Scan.FilesHashed != 0 || len(st.Away) != 1 || st.Away[0].Records != 6 {
		t.Errorf("disk a back: %d files hashed, away %+v; want none hashed and disk b's 6 records away\n%s",
			st.Scan.FilesHashed, st.Away, d.log)
	}
	for _, p := range filesA {
		l := lookupJSON(t, d, p)
		want := "current"
		if p == flagged {
			want = "corrupt"
		}
		if l["state"] != want || l["key"] != keysA[p] {
			t.Errorf("%s with disk a back: %v; want %s with %s", p, l, want, keysA[p])
		}
	}
	t.Logf("disk b: %d files hashed; disk a back: none", hashedB)
}

// diskForRoot makes an ext4 image holding n files, unmounted, and a root
// (in base) holding one file of its own and an empty folder mnt where the
// image can be mounted.
func diskForRoot(t *testing.T, n int) (usb *loopfs.FS, files []string, base, root, mnt string) {
	t.Helper()
	needRoot(t, "mount loop images")
	usb = loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 32 << 20})
	files = fillTree(t, usb.Dir, n, 500)
	usb.Unmount(t)
	base, root = newRoot(t, func(root string) { writeAged(t, filepath.Join(root, "local"), 1, 100) })
	mnt = filepath.Join(root, "usb")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return usb, files, base, root, mnt
}

// A disk mounted inside a root, unplugged and plugged again under the
// running daemon: its files are indexed, their records kept while it is
// away, and nothing is hashed again when it is back.
func TestMountInsideRoot(t *testing.T) {
	t.Parallel()
	usb, files, base, root, mnt := diskForRoot(t, 6)
	d := startOn(t, base, root)
	usb.MountAt(t, mnt)
	onUSB := make([]string, len(files))
	for i, p := range files {
		onUSB[i] = filepath.Join(mnt, strings.TrimPrefix(p, usb.Dir+"/"))
	}
	waitFor(t, d, 20*time.Second, "the mounted disk's files are indexed", func() bool {
		for _, p := range onUSB {
			if lookupJSON(t, d, p)["state"] != "current" {
				return false
			}
		}
		return true
	})
	keys := keysOf(t, d, onUSB)
	hashed := statusJSON(t, d).Scan.FilesHashed

	if err := syscall.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	// The rescan of the mount point finds it empty: the records stay.
	waitFor(t, d, 20*time.Second, "the mount point is rescanned", func() bool {
		return strings.Count(d.log.String(), `dir=`+mnt) >= 2
	})
	d.waitIdle()
	if n := statusJSON(t, d).Files; n != int64(len(files)+1) {
		t.Errorf("with the disk away the index holds %d files; want %d", n, len(files)+1)
	}
	usb.MountAt(t, mnt)
	waitFor(t, d, 20*time.Second, "the disk's files are current again", func() bool {
		for _, p := range onUSB {
			if l := lookupJSON(t, d, p); l["state"] != "current" || l["key"] != keys[p] {
				return false
			}
		}
		return true
	})
	if h := statusJSON(t, d).Scan.FilesHashed; h != hashed {
		t.Errorf("the disk plugged in again: %d files hashed, %d before; want none more", h, hashed)
	}
}

// With --one-file-system a root keeps to its own file system, as find
// -xdev: a disk mounted inside it is left out, and a lookup there says so.
func TestOneFileSystem(t *testing.T) {
	t.Parallel()
	usb, files, base, root, mnt := diskForRoot(t, 3)
	usb.MountAt(t, mnt)
	d := spawn(t, annexdRun{base: base, roots: []string{root}, extra: []string{"--one-file-system"}})
	d.waitIdle()
	if n := statusJSON(t, d).Files; n != 1 {
		t.Errorf("the index holds %d files; want 1, the root's own", n)
	}
	p := filepath.Join(mnt, strings.TrimPrefix(files[1], usb.Dir+"/"))
	if l := lookupJSON(t, d, p); l["state"] != "ignored" {
		t.Errorf("lookup of a file on the mounted disk: %v; want ignored", l)
	}
	if l := lookupJSON(t, d, filepath.Join(root, "local")); l["state"] != "current" {
		t.Errorf("lookup of the root's own file: %v", l)
	}
}
