package fsstat_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/loopfs"
)

// watchMounts runs WatchMounts for the test and returns a channel told of
// each change.
func watchMounts(t *testing.T) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	changed := make(chan struct{}, 64)
	done := make(chan error, 1)
	go func() {
		done <- fsstat.WatchMounts(ctx, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchMounts: %v", err)
		}
	})
	waitChange(t, changed, "the start")
	return changed
}

func waitChange(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("no mount table change seen after %s", what)
	}
}

func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		case <-time.After(50 * time.Millisecond):
			return
		}
	}
}

// TestIDSurvivesRenumbering is the reboot that binds a disk to another
// device: st_dev changes, the file system's id does not, and a file keeps
// its identity (Same).
func TestIDSurvivesRenumbering(t *testing.T) {
	for _, kind := range loopfs.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			changed := watchMounts(t)
			fs := loopfs.New(t, kind, loopfs.Options{Size: loopfs.MinSize[kind]})
			waitChange(t, changed, "mount")
			file := fs.Path("f")
			if err := os.WriteFile(file, []byte("content"), 0o644); err != nil {
				t.Fatal(err)
			}
			unix.Sync()
			before, err := fsstat.Lstat(file)
			if err != nil {
				t.Fatal(err)
			}
			drain(changed)
			loop := fs.Device
			fs.Renumber(t)
			waitChange(t, changed, "renumbering")
			after, err := fsstat.Lstat(file)
			if err != nil {
				t.Fatal(err)
			}
			// btrfs gives its files an anonymous st_dev, not the loop
			// device's: the loop device is what was renumbered.
			if fs.Device == loop || kind != loopfs.Btrfs && after.RawDev == before.RawDev {
				t.Fatalf("%s, st_dev %d: the test renumbered nothing", fs.Device, after.RawDev)
			}
			if after.Dev != before.Dev || !after.Same(before) {
				t.Errorf("after renumbering st_dev %d -> %d: id %x -> %x, Same %v; want the same file",
					before.RawDev, after.RawDev, before.Dev, after.Dev, after.Same(before))
			}
			if !fsstat.Stable(after.Dev) {
				t.Errorf("id %x of %s is not stable", after.Dev, kind)
			}
			got, err := fsstat.FileSystem(fs.Dir)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != after.Dev || got.Type != string(kind) {
				t.Errorf("FileSystem(%s) = %+v; want id %x, type %s", fs.Dir, got, after.Dev, kind)
			}
			if want := blkidKey(t, fs.Image); fsstat.Disk(got.Key) != want {
				t.Errorf("key %q: want the disk %q, as blkid says", got.Key, want)
			}
		})
	}
}

// TestIDTellsFileSystemsApart: two images of one kind on the same mount
// point, one after the other, with the same device number, are two file
// systems.
func TestIDTellsFileSystemsApart(t *testing.T) {
	changed := watchMounts(t)
	a := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 32 << 20})
	waitChange(t, changed, "mount")
	idA := lstatID(t, a.Dir)
	a.Unmount(t)
	waitChange(t, changed, "unmount")
	b := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 32 << 20})
	b.Unmount(t)
	drain(changed)
	// b's device mounted where a was: another file system at a's place.
	if err := unix.Mount(b.Device, a.Dir, "ext4", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(a.Dir, 0) })
	waitChange(t, changed, "mount")
	if idB := lstatID(t, a.Dir); idB == idA {
		t.Errorf("two ext4 images at %s have the same id %x", a.Dir, idA)
	}
}

// TestIDOfSubvolumes: btrfs subvolumes number inodes from the same start,
// so each is a file system of its own.
func TestIDOfSubvolumes(t *testing.T) {
	fs := loopfs.New(t, loopfs.Btrfs, loopfs.Options{Size: loopfs.MinSize[loopfs.Btrfs]})
	sub := fs.Path("sub")
	if out, err := exec.Command("btrfs", "subvolume", "create", sub).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume create: %v: %s", err, out)
	}
	top, in := lstatID(t, fs.Dir), lstatID(t, sub)
	if top == in {
		t.Errorf("the top volume and a subvolume share the id %x", top)
	}
	desc, ok := fsstat.Describe(in)
	if !ok || !strings.Contains(desc.Key, "subvol:") {
		t.Errorf("Describe(%x) = %+v, %v; want a key naming the subvolume", in, desc, ok)
	}
	topDesc, _ := fsstat.Describe(top)
	if fsstat.Disk(desc.Key) != fsstat.Disk(topDesc.Key) {
		t.Errorf("keys %q and %q: want one disk", desc.Key, topDesc.Key)
	}
	if want := blkidKey(t, fs.Image); fsstat.Disk(desc.Key) != want {
		t.Errorf("key %q: want the disk %q", desc.Key, want)
	}
	// Found through the walker's way too: the stat of an entry and its
	// directory's descriptor.
	dfd, err := unix.Open(fs.Dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, "sub", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	if got := fsstat.FromStatAt(dfd, "sub", &st).Dev; got != in {
		t.Errorf("FromStatAt: id %x, want %x", got, in)
	}
}

// TestIDOfTmpfs: a tmpfs keeps nothing across mounts, so each mount is a
// new file system (Volatile).
func TestIDOfTmpfs(t *testing.T) {
	changed := watchMounts(t)
	dir := t.TempDir()
	mnt := func() uint64 {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		waitChange(t, changed, "mount")
		id := lstatID(t, dir)
		if err := unix.Unmount(dir, 0); err != nil {
			t.Fatal(err)
		}
		waitChange(t, changed, "unmount")
		return id
	}
	first, second := mnt(), mnt()
	if !fsstat.Volatile(first) || !fsstat.Volatile(second) {
		t.Errorf("tmpfs ids %x, %x: want volatile ones", first, second)
	}
	if first == second {
		t.Errorf("two mounts of a tmpfs share the id %x", first)
	}
}

func TestLegacy(t *testing.T) {
	dir := t.TempDir()
	fi, err := fsstat.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fsstat.Legacy(fi.Dev) || !fsstat.Legacy(fi.RawDev) {
		t.Errorf("Legacy(id %x) = %v, Legacy(st_dev %d) = %v", fi.Dev, fsstat.Legacy(fi.Dev), fi.RawDev, fsstat.Legacy(fi.RawDev))
	}
	// Every way of stating a file gives the same id.
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byFd, err := fsstat.Fstat(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "."), &st); err != nil {
		t.Fatal(err)
	}
	if byFd.Dev != fi.Dev || fsstat.FromStat(&st).Dev != fi.Dev {
		t.Errorf("ids differ: Lstat %x, Fstat %x, FromStat %x", fi.Dev, byFd.Dev, fsstat.FromStat(&st).Dev)
	}
}

func lstatID(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := fsstat.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Dev
}

// blkidKey is the key of the file system in image by the UUID blkid reads
// from its superblock.
func blkidKey(t *testing.T, image string) string {
	t.Helper()
	out, err := exec.Command("blkid", "-s", "UUID", "-o", "value", image).Output()
	if err != nil {
		t.Fatalf("blkid %s: %v", image, err)
	}
	return "uuid:" + strings.ReplaceAll(strings.TrimSpace(string(out)), "-", "")
}

// TestIDOfTwins: a copy of a disk keeps its UUID. Alone, it is the disk it
// was copied from; mounted beside it, it is a file system of its own (a
// twin), and it stays one while it is mounted, even when the original is
// unplugged and plugged in again.
func TestIDOfTwins(t *testing.T) {
	changed := watchMounts(t)
	a := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 32 << 20})
	waitChange(t, changed, "mount")
	if err := os.WriteFile(a.Path("f"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	idA := lstatID(t, a.Dir)
	a.Unmount(t)
	waitChange(t, changed, "unmount")
	b := a.Clone(t)
	b.Mount(t)
	waitChange(t, changed, "mount")
	if got := lstatID(t, b.Dir); got != idA {
		t.Errorf("a copy mounted alone: id %x; want its original's, %x", got, idA)
	}
	b.Unmount(t)
	waitChange(t, changed, "unmount")

	a.Mount(t)
	waitChange(t, changed, "mount")
	b.Mount(t)
	waitChange(t, changed, "mount")
	fa, err := fsstat.Lstat(a.Path("f"))
	if err != nil {
		t.Fatal(err)
	}
	fb, err := fsstat.Lstat(b.Path("f"))
	if err != nil {
		t.Fatal(err)
	}
	if fa.Dev != idA || fb.Dev == idA || fa.Ino != fb.Ino || !fsstat.Stable(fb.Dev) {
		t.Fatalf("the original and its copy mounted at once: ids %x and %x (inodes %d, %d); want %x and a stable one of its own",
			fa.Dev, fb.Dev, fa.Ino, fb.Ino, idA)
	}
	desc, err := fsstat.FileSystem(b.Dir)
	if err != nil {
		t.Fatal(err)
	}
	descA, _ := fsstat.Describe(idA)
	if desc.ID != fb.Dev || desc.Twin != a.Dir || fsstat.Disk(desc.Key) == fsstat.Disk(descA.Key) {
		t.Errorf("FileSystem(%s) = %+v; want id %x, the twin of %s, another disk than %q", b.Dir, desc, fb.Dev, a.Dir, descA.Key)
	}
	if descA.Twin != "" {
		t.Errorf("the original is called a twin: %+v", descA)
	}

	// The original unplugged and plugged in again: each keeps its id.
	a.Unmount(t)
	waitChange(t, changed, "unmount")
	if got := lstatID(t, b.Dir); got != fb.Dev {
		t.Errorf("the copy with the original unplugged: id %x; want its own, %x", got, fb.Dev)
	}
	a.Mount(t)
	waitChange(t, changed, "mount")
	if ga, gb := lstatID(t, a.Dir), lstatID(t, b.Dir); ga != idA || gb != fb.Dev {
		t.Errorf("the original plugged in again: ids %x and %x; want %x and %x", ga, gb, idA, fb.Dev)
	}

	// The index knows both. Met first and alone after a remount, the copy
	// is still the twin at its place, and the original keeps the key.
	fsstat.Remember(descA.Key, a.Dir)
	fsstat.Remember(desc.Key, b.Dir)
	a.Unmount(t)
	b.Unmount(t)
	waitChange(t, changed, "unmount")
	drain(changed)
	b.Mount(t)
	waitChange(t, changed, "mount")
	if got, _ := fsstat.FileSystem(b.Dir); got.ID != fb.Dev || got.Twin != a.Dir {
		t.Errorf("the copy alone at its place, known as a twin there: %+v; want id %x, the twin of %s", got, fb.Dev, a.Dir)
	}
	a.Mount(t)
	waitChange(t, changed, "mount")
	if ga, gb := lstatID(t, a.Dir), lstatID(t, b.Dir); ga != idA || gb != fb.Dev {
		t.Errorf("the original mounted after its copy: ids %x and %x; want %x and %x", ga, gb, idA, fb.Dev)
	}
}
