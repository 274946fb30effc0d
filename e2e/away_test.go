package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/loopfs"
)

// An audit run while a root's file system is away (a USB disk pulled, a
// lazy unmount) finds nothing at the paths. The files are not missing:
// their file system is elsewhere, the indexer keeps their records. The
// audit leaves them to a later pass, and the findings made before stay
// listed, while the disk is away and once it is back.
func TestAuditWhileFileSystemAway(t *testing.T) {
	t.Parallel()
	needRoot(t, "mount loop images")
	for _, tc := range []struct {
		name string
		sub  string // the root, under the mount point
	}{{"root is the mount point", ""}, {"root is a folder of the mount", "home"}} {
		t.Run(tc.name, func(t *testing.T) {
			fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
			root := fs.Path(tc.sub)
			files := fillTree(t, root, 4, 300)
			d := startOn(t, dedupBase(t, auditConf), root)
			keys := keysOf(t, d, files)
			flagged := files[0]
			fs.Sync(t)
			fs.FlipByte(t, flagged, 100)
			if code, run := auditRun(t, d, "--full-speed"); code != 4 || run.Counts["corrupt"] != 1 {
				t.Fatalf("audit of the flipped file: exit %d %+v", code, run)
			}
			want := map[string]string{flagged: "corrupt"}
			wantProblems(t, d, want)

			unplug(t, d, fs)
			code, run := auditRun(t, d, "--full-speed")
			if run.Counts["missing"] != 0 || run.Counts["ok"] != 0 {
				t.Errorf("audit with the file system away: exit %d %+v; want no file counted missing (nor ok)", code, run)
			}
			n := int64(len(files))
			if code != 1 || run.Left.Files != n || run.Left.Away != n || run.Left.Bytes == 0 {
				t.Errorf("audit with the file system away: exit %d, left %+v; want exit 1 and all %d files left, away", code, run.Left, n)
			}
			if l := auditStatus(t, d).LastPass; l == nil || l.Left.Away != n {
				t.Errorf("the pass with the file system away: %+v; want its %d files left, away", l, n)
			}
			if r := d.ctl("", "audit", "status"); !strings.Contains(r.stdout, "left unverified") {
				t.Errorf("audit status does not say the pass left files:\n%s", r.stdout)
			}
			wantProblems(t, d, want)
			wantAbsent(t, d, flagged, keys[flagged], "corrupt")
			wantAbsent(t, d, files[1], keys[files[1]], "")

			fs.Mount(t)
			d.waitIdle()
			wantProblems(t, d, want)
			wantKept(t, d, flagged, "corrupt", keys[flagged])
			if code, run := auditRun(t, d, "--full-speed"); code != 4 || run.Counts["corrupt"] != 1 || run.Counts["ok"] != int64(len(files)-1) || run.Left.Files != 0 {
				t.Errorf("audit once the file system is back: exit %d %+v; want exit 4, one corrupt, %d ok", code, run, len(files)-1)
			}
			wantProblems(t, d, want)
		})
	}
}

// annexd started while the disk mounted at a root is away: the root is the
// empty folder beneath the mount point. Status says the root's file system
// is not mounted, as it does when the disk goes away under the running
// daemon, and the root is picked up, with no hashing, when the disk is
// mounted.
func TestStartWhileRootAway(t *testing.T) {
	t.Parallel()
	needRoot(t, "mount loop images")
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := fs.Path("")
	files := fillTree(t, root, 4, 300)
	base := dedupBase(t, auditConf)
	d := startOn(t, base, root)
	keys := keysOf(t, d, files)
	d.stop()

	fs.Unmount(t)
	d = startOn(t, base, root)
	d.waitIdle()
	st := statusJSON(t, d)
	if len(st.Roots) != 1 || !strings.Contains(st.Roots[0].Away, "not mounted") || st.Watcher.Healthy {
		t.Errorf("started with the root's disk away: watcher %+v roots %+v; want the root away and the watcher not healthy", st.Watcher, st.Roots)
	}
	if r := d.ctl("", "status"); !strings.Contains(r.stdout, "not mounted") {
		t.Errorf("status does not say the root's file system is away:\n%s", r.stdout)
	}

	fs.Mount(t)
	// The rescan the mount starts ends first, so that the file made next
	// is hashed once, by its events (a lookup racing the rescan hashed it
	// twice, 1 run in 6).
	waitFor(t, d, 20*time.Second, "the root is watched again", func() bool {
		st := statusJSON(t, d)
		return st.Roots[0].Away == "" && st.Watcher.Healthy && st.Idle
	})
	made := filepath.Join(root, "made after the mount")
	write(t, made, "made after the mount")
	waitHashed(t, d, 1, "the file made after the mount indexed")
	if l := lookupJSON(t, d, made); l["state"] != "current" {
		t.Errorf("%s after the mount: %v", made, l)
	}
	for p, k := range keysOf(t, d, files) {
		if k != keys[p] {
			t.Errorf("%s: key %s, was %s", p, k, keys[p])
		}
	}
	// One file, the one made after the mount; the tree hashed again would
	// count all its files.
	if st := statusJSON(t, d); st.Scan.FilesHashed != 1 {
		t.Errorf("%d files hashed since the restart; want 1 (the one made after the mount)", st.Scan.FilesHashed)
	}
}

// unplug unmounts fs, the disk of d's one root, and waits until status
// says the root is away.
func unplug(t *testing.T, d *daemon, fs *loopfs.FS) {
	t.Helper()
	fs.Unmount(t)
	waitFor(t, d, 10*time.Second, "status says the root is away", func() bool {
		st := statusJSON(t, d)
		return len(st.Roots) == 1 && st.Roots[0].Away != ""
	})
}

// wantAbsent fails unless lookup says path is on a file system not mounted
// now, with its recorded key and finding (none: "").
func wantAbsent(t *testing.T, d *daemon, path, key, finding string) {
	t.Helper()
	l := lookupJSON(t, d, path)
	if got, _ := l["finding"].(string); l["state"] != "absent" || l["key"] != key || got != finding ||
		!strings.Contains(fmt.Sprint(l["message"]), "not mounted") {
		t.Errorf("lookup %s with its file system away: %v; want absent, key %s, finding %q, a message saying it is not mounted", path, l, key, finding)
	}
	if r := d.ctl("", "lookup", path); r.code != 1 || !strings.Contains(r.stderr, "not mounted") || !strings.Contains(r.stderr, key) {
		t.Errorf("lookup %s with its file system away: exit %d, stderr %q; want exit 1 and a message naming the key and saying it is not mounted", path, r.code, r.stderr)
	}
}

// A disk unmounted (umount -l, a USB disk pulled) while the audit reads a
// file from it: the read goes on through the open descriptor and ends,
// but the file is no longer at its path. It is not missing: its file
// system went away with it. The run leaves it to a later pass, away, and
// verifies it once the disk is back.
func TestAuditDiskAwayMidRead(t *testing.T) {
	t.Parallel()
	needRoot(t, "mount loop images")
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 128 << 20})
	root := fs.Path("")
	big := filepath.Join(root, "big.bin")
	writeAged(t, big, 48, 48<<20)
	// 8 MB/s: the read of big.bin takes about 6 s.
	conf := "[audit]\nmax_load = -1.0\nmax_pressure = -1.0\nignore_battery = true\nmax_rate = \"8MB/s\"\n"
	d := startOn(t, dedupBase(t, conf), root)
	key := keysOf(t, d, []string{big})[big]
	fs.Sync(t)

	done := make(chan result, 1)
	go func() { done <- d.ctl("", "audit", "run", "--wait", "--json", big) }()
	waitFor(t, d, 20*time.Second, "the audit reads big.bin", func() bool {
		return auditStatus(t, d).State == "running"
	})
	time.Sleep(time.Second)
	if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
		t.Fatalf("umount -l %s: %v", root, err)
	}
	r := <-done
	var run api.AuditRun
	if err := json.Unmarshal([]byte(r.stdout), &run); err != nil {
		t.Fatalf("audit run --wait --json: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if run.Counts["missing"] != 0 || run.Counts["ok"] != 0 {
		t.Errorf("audit with the disk gone mid-read: exit %d %+v; want the file neither missing nor ok", r.code, run)
	}
	if r.code != 1 || run.Left.Files != 1 || run.Left.Away != 1 {
		t.Errorf("audit with the disk gone mid-read: exit %d, left %+v; want exit 1 and the file left, away", r.code, run.Left)
	}
	if rep := d.ctl("", "audit", "run", "--wait", big); !strings.Contains(rep.stdout+rep.stderr, "not mounted") {
		t.Errorf("audit run with the disk away does not say so: exit %d\n%s%s", rep.code, rep.stdout, rep.stderr)
	}
	wantAbsent(t, d, big, key, "")

	fs.Mount(t)
	d.waitIdle()
	if code, run := auditRun(t, d, "--full-speed", big); code != 0 || run.Counts["ok"] != 1 || run.Left.Files != 0 {
		t.Errorf("audit once the disk is back: exit %d %+v; want big.bin ok", code, run)
	}
	wantProblems(t, d, map[string]string{})
	if k := keysOf(t, d, []string{big})[big]; k != key {
		t.Errorf("big.bin: key %s once the disk is back, was %s", k, key)
	}
}

// A dedup run while the disk of its files is away (unmounted, a USB disk
// pulled) changes nothing and says why: the files are away, not changed.
// Once the disk is back, the same run shares every copy.
func TestDedupWhileFileSystemAway(t *testing.T) {
	t.Parallel()
	needRoot(t, "mount loop images")
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	root := fs.Path("home")
	var all []string
	for i := range 3 {
		for _, dir := range []string{"a", "b"} {
			p := filepath.Join(root, dir, fmt.Sprintf("f%d.bin", i))
			writeRandom(t, p, uint64(i), 1<<20)
			all = append(all, p)
		}
	}
	d := startOn(t, dedupBase(t, ""), root)
	fs.Sync(t)
	unplug(t, d, fs)
	dupsJSON(t, d) // surveys the groups, the disk away
	r := d.ctl("", "dedup")
	if r.code != 1 || !strings.Contains(r.stdout, "skipped 3: away 3") || strings.Contains(r.stdout, "changed") {
		t.Errorf("dedup with the disk away: exit %d; want exit 1 and the 3 copies skipped as away\n%s%s", r.code, r.stdout, r.stderr)
	}

	fs.Mount(t)
	d.waitIdle()
	// The surveys made while the disk was away are not kept: dups says
	// again what the files hold.
	var reclaimable int64
	for _, g := range dupsJSON(t, d) {
		reclaimable += g.Reclaimable
	}
	if reclaimable != 3<<20 {
		t.Errorf("dups once the disk is back: %d bytes reclaimable, want %d", reclaimable, 3<<20)
	}
	before := statesOf(t, all)
	r = d.ctl("", "dedup")
	if r.code != 0 || !strings.Contains(r.stdout, "freed 3.0 MiB in 3 of 3 files") {
		t.Errorf("dedup once the disk is back: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	sameStates(t, "after the run", before)
}

// dups --resurvey while a disk is away cannot survey its copies; once the
// disk is back dups says again what they hold (a survey of the away
// copies kept would say "not surveyed" until a file changed).
func TestDupsWhileFileSystemAway(t *testing.T) {
	t.Parallel()
	needRoot(t, "mount loop images")
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := fs.Path("")
	writeRandom(t, filepath.Join(root, "one"), 7, 2<<20)
	writeRandom(t, filepath.Join(root, "two"), 7, 2<<20)
	d := startOn(t, dedupBase(t, ""), root)
	fs.Sync(t)
	unplug(t, d, fs)
	if gs := dupsJSON(t, d, "--resurvey"); len(gs) != 1 || gs[0].Reclaimable != 0 {
		t.Fatalf("dups --resurvey with the disk away: %+v; want one group, nothing reclaimable", gs)
	}
	fs.Mount(t)
	d.waitIdle()
	if gs := dupsJSON(t, d); len(gs) != 1 || gs[0].Reclaimable != 2<<20 {
		t.Errorf("dups once the disk is back: %+v; want 2 MiB reclaimable", gs)
	}
}
