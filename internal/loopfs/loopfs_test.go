package loopfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Magic numbers of statfs(2).
var magic = map[Kind]int64{XFS: 0x58465342, Btrfs: 0x9123683e, Ext4: 0xef53}

// TestEachKind mounts every kind, checks it is the file system asked for
// (and that XFS and btrfs can share extents while ext4 cannot), and checks
// that the cleanup left no mount and no loop device behind.
func TestEachKind(t *testing.T) {
	for _, kind := range Kinds {
		var fs *FS
		t.Run(string(kind), func(t *testing.T) {
			fs = New(t, kind, Options{Size: MinSize[kind]})
			if !fs.Mounted() {
				t.Fatalf("%s is not mounted after New", fs.Dir)
			}
			var st unix.Statfs_t
			if err := unix.Statfs(fs.Dir, &st); err != nil {
				t.Fatal(err)
			}
			if st.Type != magic[kind] {
				t.Errorf("statfs type %#x, want %#x", st.Type, magic[kind])
			}
			err := cloneFile(fs.Path("a"), fs.Path("b"))
			if kind == Ext4 {
				if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EXDEV) {
					t.Errorf("FICLONE on ext4: %v, want an error saying it cannot", err)
				}
			} else if err != nil {
				t.Errorf("FICLONE on %s: %v", kind, err)
			}
			if backing(fs.Device) != fs.Image {
				t.Errorf("%s backs %q, want %q", fs.Device, backing(fs.Device), fs.Image)
			}
		})
		if fs == nil {
			continue
		}
		assertGone(t, fs)
	}
}

// TestRemount: Unmount and Mount keep the device and the files.
func TestRemount(t *testing.T) {
	fs := New(t, Ext4, Options{Size: MinSize[Ext4]})
	if err := os.WriteFile(fs.Path("f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := fs.Free(t)
	fs.Unmount(t)
	if fs.Mounted() {
		t.Fatal("still mounted after Unmount")
	}
	fs.Mount(t)
	b, err := os.ReadFile(fs.Path("f"))
	if err != nil || string(b) != "kept" {
		t.Fatalf("after Mount: %q, %v", b, err)
	}
	if after := fs.Free(t); after != before {
		t.Errorf("free bytes %d after a remount, %d before", after, before)
	}
}

// TestUnmountWhileBusy: a file system with a file open for a moment is
// unmounted once the file is closed; one whose file stays open is not,
// and the error says it is busy.
func TestUnmountWhileBusy(t *testing.T) {
	fs := New(t, Ext4, Options{Size: MinSize[Ext4]})
	f, err := os.Create(fs.Path("open"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(fs.Dir, 0); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("unmount with a file open: %v, want EBUSY", err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		f.Close()
	}()
	fs.Unmount(t)
	if fs.Mounted() {
		t.Fatal("still mounted after Unmount")
	}
	fs.Mount(t)
	kept, err := os.Open(fs.Path("open"))
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	start := time.Now()
	if err := unmountWhenFree(fs.Dir); !errors.Is(err, unix.EBUSY) || time.Since(start) < busyFor {
		t.Errorf("unmount with a file kept open: %v after %v, want EBUSY after %v", err, time.Since(start), busyFor)
	}
}

// TestShutdown: a shut-down XFS or ext4 keeps what was synced and loses a
// rewrite that was not, after Unmount and Mount; one left shut down is
// still cleaned up.
func TestShutdown(t *testing.T) {
	for _, kind := range []Kind{XFS, Ext4} {
		t.Run(string(kind), func(t *testing.T) {
			fs := New(t, kind, Options{Size: MinSize[kind]})
			f, err := os.Create(fs.Path("f"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString("synced"); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("LOST!!"), 0); err != nil {
				t.Fatal(err)
			}
			f.Close()
			fs.Shutdown(t)
			if _, err := os.ReadFile(fs.Path("f")); err == nil {
				t.Error("the file system still reads after Shutdown")
			}
			fs.Unmount(t)
			fs.Mount(t)
			if b, err := os.ReadFile(fs.Path("f")); err != nil || string(b) != "synced" {
				t.Errorf("after the cut: %q, %v; want the synced bytes", b, err)
			}
			fs.Shutdown(t)
			if !fs.Mounted() {
				t.Error("a shut-down file system does not count as mounted: cleanup would leave it")
			}
		})
	}
}

// TestCleanupAfterFailure runs a child test that mounts an image and then
// fails, and checks that the child left neither mount nor device behind.
func TestCleanupAfterFailure(t *testing.T) {
	if dir := os.Getenv("LOOPFS_CHILD"); dir != "" {
		fs := New(t, Ext4, Options{Size: MinSize[Ext4]})
		rec := fmt.Sprintf("%s\n%s\n%s\n", fs.Dir, fs.Device, fs.Image)
		if err := os.WriteFile(filepath.Join(dir, "mounted"), []byte(rec), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Fatal("failing on purpose, after the mount")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCleanupAfterFailure$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LOOPFS_CHILD="+dir)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "failing on purpose") {
		t.Fatalf("the child should have failed on purpose: %v\n%s", err, out)
	}
	rec, err := os.ReadFile(filepath.Join(dir, "mounted"))
	if err != nil {
		t.Fatalf("the child did not mount: %v\n%s", err, out)
	}
	f := strings.Split(strings.TrimSpace(string(rec)), "\n")
	assertGone(t, &FS{Dir: f[0], Device: f[1], Image: f[2]})
}

// TestFailsLoudly: what is missing is named, never skipped over.
func TestFailsLoudly(t *testing.T) {
	for _, c := range []struct {
		kind Kind
		opts Options
		want string
	}{
		{"zfs", Options{Size: 1 << 30}, `unknown kind "zfs"`},
		{XFS, Options{Size: 1 << 20}, "below the"},
	} {
		if err := preflight(c.kind, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("preflight(%s, %d): %v, want %q", c.kind, c.opts.Size, err, c.want)
		}
	}
	t.Setenv("PATH", t.TempDir())
	err := preflight(Btrfs, Options{Size: 1 << 30})
	if err == nil || !strings.Contains(err.Error(), "btrfs-progs") {
		t.Errorf("preflight without mkfs.btrfs: %v, want the package named", err)
	}
}

// assertGone fails unless fs is unmounted and its device no longer backed
// by its image.
func assertGone(t *testing.T, fs *FS) {
	t.Helper()
	if fs.Mounted() {
		t.Errorf("%s still mounted after cleanup", fs.Dir)
		unix.Unmount(fs.Dir, unix.MNT_DETACH)
	}
	if b := backing(fs.Device); b == fs.Image {
		t.Errorf("%s still backed by %s after cleanup", fs.Device, b)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), " "+fs.Dir+" ") {
		t.Errorf("%s still in mountinfo", fs.Dir)
	}
}

// backing returns the file behind a loop device, "" when none.
func backing(dev string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// cloneFile writes src and clones it into dst with FICLONE.
func cloneFile(src, dst string) error {
	if err := os.WriteFile(src, make([]byte, 1<<16), 0o644); err != nil {
		return err
	}
	s, err := os.Open(src)
	if err != nil {
		return err
	}
	defer s.Close()
	d, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.IoctlFileClone(int(d.Fd()), int(s.Fd()))
}
