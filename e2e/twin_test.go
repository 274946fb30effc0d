package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/loopfs"
)

// A disk and its clone (dd, cp of an image: the same UUID) mounted at once,
// each a root. Their inodes are numbered alike, but they are two disks: a
// write on one is no witness of a change on the other, so rot on the clone
// stays a finding, and its key stays the one it had.
func TestTwinDisksMountedAtOnce(t *testing.T) {
	t.Parallel()
	needRoot(t, "mount loop images")
	a := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 32 << 20})
	files := fillTree(t, a.Path("home"), 3, 600)
	a.Unmount(t)
	b := a.Clone(t)
	a.Mount(t)
	b.Mount(t) // after the original, as a copy plugged in beside it
	orig, twin := files[1], b.Path("home", filepath.Base(files[1]))

	base := dedupBase(t, auditConf)
	d := startOn(t, base, a.Path("home"), b.Path("home"))
	key := lookupJSON(t, d, twin)["key"]
	if l := lookupJSON(t, d, orig); l["key"] != key || l["state"] != "current" {
		t.Fatalf("%s: %v; want current with its clone's key %v", orig, l, key)
	}

	// The clone rots; then the original is written, its bytes the same and
	// its mtime kept: the ctime moves, and the daemon sees the write.
	b.Sync(t)
	b.FlipByte(t, twin, 100)
	data, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(orig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(orig, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(orig, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the watcher's event is on its way
	d.waitIdle()

	if l := lookupJSON(t, d, orig); l["key"] != key || l["state"] != "current" {
		t.Errorf("the original after its rewrite: %v; want current with %v", l, key)
	}
	if l := lookupJSON(t, d, twin); l["key"] != key {
		t.Errorf("the rotten clone after a write on the original: %v; want its key from before, %v\n%s", l, key, d.log)
	}
	if code, run := auditRun(t, d, "--full-speed", twin); code != 4 || run.Counts["corrupt"] != 1 {
		t.Errorf("audit of the rotten clone: exit %d %+v; want exit 4 and 1 corrupt", code, run)
	}
	if !d.waitLog("tune2fs -U random") {
		t.Errorf("the log does not say how to give the clone a UUID of its own:\n%s", d.log)
	}

	// A restart with both mounted: each keeps its id, nothing is hashed
	// again, and the finding stays.
	d.stop()
	d = startOn(t, base, a.Path("home"), b.Path("home"))
	if st := statusJSON(t, d); st.Scan.FilesHashed != 0 {
		t.Errorf("after a restart, %d files were hashed again; want 0\n%s", st.Scan.FilesHashed, d.log)
	}
	if l := lookupJSON(t, d, twin); l["key"] != key || l["state"] != "corrupt" {
		t.Errorf("the rotten clone after a restart: %v; want corrupt with %v", l, key)
	}

	// The original unplugged, a restart: the clone alone is still the twin
	// at its place, and its records hold.
	d.stop()
	a.Unmount(t)
	d = startOn(t, base, b.Path("home"))
	if st := statusJSON(t, d); st.Scan.FilesHashed != 0 {
		t.Errorf("the clone alone after a restart: %d files hashed again; want 0\n%s", st.Scan.FilesHashed, d.log)
	}
	if l := lookupJSON(t, d, twin); l["key"] != key || l["state"] != "corrupt" {
		t.Errorf("the rotten clone alone after a restart: %v; want corrupt with %v", l, key)
	}
}
