package dedup

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/loopfs"
)

// TestReflink deduplicates on XFS and btrfs: a file larger than one
// FIDEDUPERANGE call, an odd size, two copies of each. Contents, inodes,
// mtimes and ctimes stay; the free space grows by what the run reports;
// a second run finds everything shared and does nothing.
func TestReflink(t *testing.T) {
	for _, kind := range []loopfs.Kind{loopfs.XFS, loopfs.Btrfs} {
		t.Run(string(kind), func(t *testing.T) {
			fs := loopfs.New(t, kind, loopfs.Options{Size: 512 << 20})
			st := openStore(t)
			big, odd := content(1, 3*dedupeChunk+12345), content(2, 777_777)
			files := map[string][]byte{
				"big/a": big, "big/b": big, "big/sub/c": big,
				"odd/a.JPG": odd, "odd/b.jpg": odd, "odd/c.jpeg": odd,
			}
			for name, data := range files {
				writeFile(t, fs.Path(name), data)
			}
			before := map[string]statID{}
			for name := range files {
				record(t, st, fs.Path(name))
				before[name] = idOf(lstat(t, fs.Path(name)))
			}
			free := fs.Free(t)
			d := New(st, Options{})
			plan, res, err := runDedup(t, d, Request{})
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if plan.Actions != 4 || res.Done != 4 || len(res.Skips) != 0 {
				t.Fatalf("planned %d, done %d, skipped %v; want 4, 4, none", plan.Actions, res.Done, res.Skips)
			}
			want := int64(2*len(big) + 2*len(odd))
			if res.Freed < want || res.Freed > want+4*65536 {
				t.Errorf("freed %d bytes, want the targets' %d rounded up to blocks", res.Freed, want)
			}
			gained := fs.Free(t) - free
			t.Logf("freed %d (want %d), statfs gained %d", res.Freed, want, gained)
			if gained < res.Freed*9/10 {
				t.Errorf("statfs shows %d more bytes free, the run reports %d freed", gained, res.Freed)
			}
			for name, data := range files {
				assertContent(t, fs.Path(name), data)
				if got := idOf(lstat(t, fs.Path(name))); got != before[name] {
					t.Errorf("%s: stat %+v after the run, %+v before", name, got, before[name])
				}
			}
			for _, g := range plan.Groups {
				for _, a := range g.Actions {
					if !sharesAll(t, string(a.Targets[0].Path), string(g.Keeper.Path)) {
						t.Errorf("%s does not share %s's extents", a.Targets[0].Path, g.Keeper.Path)
					}
				}
			}
			again, res2, err := runDedup(t, d, Request{})
			if err != nil || again.Actions != 0 || again.Shared != 4 || res2.Done != 0 {
				t.Errorf("second run: %d actions, %d found shared, %d done, %v; want 0, 4, 0",
					again.Actions, again.Shared, res2.Done, err)
			}
		})
	}
}

// statID is the comparable part of a stat.
func idOf(fi fsstat.FileInfo) statID {
	return statID{fi.Dev, fi.Ino, fi.Size, fi.MtimeNs, fi.CtimeNs}
}

type statID struct {
	Dev, Ino         uint64
	Size             int64
	MtimeNs, CtimeNs int64
}

// TestReflinkUnsupported: on ext4 and tmpfs the plan and the run name the
// file system and --hardlink, and nothing changes.
func TestReflinkUnsupported(t *testing.T) {
	for _, kind := range []string{"ext4", "tmpfs"} {
		t.Run(kind, func(t *testing.T) {
			var dir string
			if kind == "ext4" {
				dir = loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20}).Dir
			} else {
				dir = mountTmpfs(t)
			}
			st := openStore(t)
			data := content(3, 100_000)
			for _, n := range []string{"a", "b"} {
				writeFile(t, dir+"/"+n, data)
				record(t, st, dir+"/"+n)
			}
			before := idOf(lstat(t, dir+"/b"))
			d := New(st, Options{})
			plan, res, err := runDedup(t, d, Request{})
			if len(plan.Unsupported) != 1 || plan.Unsupported[0].FS != kind {
				t.Errorf("plan names %v as unsupported, want %s", plan.Unsupported, kind)
			}
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), kind) || !strings.Contains(err.Error(), "--hardlink") {
				t.Errorf("Apply: %v, want an error naming %s and --hardlink", err, kind)
			}
			if res.Done != 0 || res.Skipped[SkipUnsupported] != 1 {
				t.Errorf("done %d, skipped %v; want the one action skipped as unsupported", res.Done, res.Skipped)
			}
			assertContent(t, dir+"/b", data)
			if got := idOf(lstat(t, dir+"/b")); got != before {
				t.Errorf("stat %+v after the run, %+v before", got, before)
			}
		})
	}
}

// TestReflinkDiffers: when the index is wrong about a file whose stat did
// not change, the kernel's comparison refuses, both files stay as they
// were and both are handed back to be hashed again.
func TestReflinkDiffers(t *testing.T) {
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	st := openStore(t)
	a, b := content(4, 200_000), content(4, 200_000)
	b[150_000] ^= 1
	writeFile(t, fs.Path("a"), a)
	writeFile(t, fs.Path("b"), b)
	ra := record(t, st, fs.Path("a"))
	rb := recordOf(lstat(t, fs.Path("b")), ra.Digest, ra.HashedAt) // a record that is wrong
	if err := st.Put(context.Background(), []byte(fs.Path("b")), rb); err != nil {
		t.Fatal(err)
	}
	var rehashed rehashLog
	d := New(st, Options{Indexer: &rehashed})
	_, res, err := runDedup(t, d, Request{})
	if err != nil || res.Done != 0 || res.Skipped[SkipDiffers] != 1 {
		t.Fatalf("done %d, skipped %v, %v; want one skip for differing bytes", res.Done, res.Skipped, err)
	}
	assertContent(t, fs.Path("a"), a)
	assertContent(t, fs.Path("b"), b)
	got := rehashed.list()
	slices.Sort(got)
	if want := []string{fs.Path("a"), fs.Path("b")}; !slices.Equal(got, want) {
		t.Errorf("rehashed %v, want %v", got, want)
	}
}

// mountTmpfs mounts a small tmpfs for the test.
func mountTmpfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("mounting a tmpfs needs root (CI runs the tests as root); run the test with sudo")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount tmpfs: %v", err)
		}
	})
	return dir
}

// TestSharing: what a target shares with its keeper, and what it frees.
func TestSharing(t *testing.T) {
	k := []extent{{logical: 0, physical: 1000, length: 100, flags: extentShared}, {logical: 100, physical: 5000, length: 50}}
	for _, c := range []struct {
		name            string
		target          []extent
		same, exclusive int64
	}{
		{"all the keeper's", []extent{{0, 1000, 100, extentShared}}, 100, 0},
		{"shared with someone else", []extent{{0, 9000, 100, extentShared}}, 0, 0},
		{"its own", []extent{{0, 2000, 150, 0}}, 0, 150},
		{"half the keeper's", []extent{{50, 1050, 50, extentShared}, {100, 3000, 50, 0}}, 50, 50},
		{"inline", []extent{{0, 0, 4096, extentDataInline | extentShared}}, 0, 0},
	} {
		same, excl := sharing(c.target, k)
		if same != c.same || excl != c.exclusive {
			t.Errorf("%s: same %d exclusive %d, want %d %d", c.name, same, excl, c.same, c.exclusive)
		}
	}
	before := []extent{{0, 2000, 100, 0}, {100, 3000, 50, extentShared}}
	after := []extent{{0, 1000, 100, extentShared}, {100, 3000, 50, extentShared}}
	if got := freedBy(before, after); got != 100 {
		t.Errorf("freedBy %d, want 100: only the bytes that were the target's alone", got)
	}
	// A keeper with a hole: the target's block there goes too.
	before = []extent{{0, 2000, 100, 0}, {100, 4000, 50, 0}}
	after = []extent{{0, 1000, 100, extentShared}}
	if got := freedBy(before, after); got != 150 {
		t.Errorf("freedBy %d, want 150: a block that became a hole is freed as well", got)
	}
	// One still its own after a run cut short frees nothing.
	if got := freedBy(before, before); got != 0 {
		t.Errorf("freedBy %d of an unchanged target, want 0", got)
	}
}
