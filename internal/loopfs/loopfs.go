// Package loopfs mounts a fresh file system image on a loop device for the
// length of one test. Only tests import it.
//
// New makes a sparse image of the asked size under t.TempDir(), formats it
// (XFS with reflink, btrfs or ext4), attaches it to a free loop device and
// mounts it on a private directory. t.Cleanup unmounts it and detaches the
// device, also when the test failed or called t.FailNow.
//
// A test that cannot mount fails and names what is missing: root, the mkfs
// program and its Debian package, the loop driver, the kernel's support for
// the file system. It never skips, so a machine without them cannot pass
// the tests silently. CI (.ci/run) runs as root and installs the programs.
package loopfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Kind is a file system type New can make.
type Kind string

// The kinds of file system New can make.
const (
	XFS   Kind = "xfs" // formatted with reflink=1, so it can share extents
	Btrfs Kind = "btrfs"
	Ext4  Kind = "ext4"
)

// Kinds lists every kind, in a fixed order, for tests that run on each.
var Kinds = []Kind{XFS, Btrfs, Ext4}

// MinSize is the smallest image each kind accepts. mkfs.xfs refuses file
// systems below 300 MiB; btrfs needs about 110 MiB.
var MinSize = map[Kind]int64{XFS: 300 << 20, Btrfs: 128 << 20, Ext4: 16 << 20}

// Options describe the file system to make. Size is the only one required.
type Options struct {
	Size         int64    // image size in bytes, at least MinSize[kind]
	MkfsArgs     []string // extra arguments for mkfs, before the image path; an XFS "-m" replaces the default "-m reflink=1"
	MountOptions string   // the data argument of mount(2), such as "noatime"
	// SectorSize is the loop device's logical block size; 0: 512. A
	// file system on it needs a block size at least as large (MkfsArgs).
	SectorSize uint32
}

// FS is a mounted image.
type FS struct {
	Kind   Kind
	Dir    string // the mount point
	Image  string // the image file
	Device string // the loop device, such as /dev/loop3

	opts Options
	loop *os.File // held open so the device stays ours until cleanup
}

// packages names the Debian package holding each kind's mkfs.
var packages = map[Kind]string{XFS: "xfsprogs", Btrfs: "btrfs-progs", Ext4: "e2fsprogs"}

// mkfsArgs are the arguments each kind's mkfs needs to format a file quietly.
var mkfsArgs = map[Kind][]string{
	XFS:   {"-q", "-f", "-m", "reflink=1"},
	Btrfs: {"-q", "-f"},
	Ext4:  {"-q", "-F"},
}

// New makes, formats and mounts an image of the given kind, or fails the
// test saying what is missing. The mount is removed in t.Cleanup.
func New(t testing.TB, kind Kind, opts Options) *FS {
	t.Helper()
	fs, err := mount(t, kind, opts)
	if err != nil {
		t.Fatalf("loopfs: cannot mount a %s image: %v", kind, err)
	}
	return fs
}

func mount(t testing.TB, kind Kind, opts Options) (*FS, error) {
	if err := preflight(kind, opts); err != nil {
		return nil, err
	}
	// TempDir registers its removal first, so it runs after the unmount.
	base := t.TempDir()
	fs := &FS{Kind: kind, Dir: filepath.Join(base, "mnt"), Image: filepath.Join(base, "fs.img"), opts: opts}
	if err := os.Mkdir(fs.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := makeImage(fs.Image, kind, opts); err != nil {
		return nil, err
	}
	if err := fs.attach(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { fs.cleanup(t) })
	if err := fs.mountDevice(); err != nil {
		return nil, err
	}
	return fs, nil
}

// preflight checks what New needs before it creates anything.
func preflight(kind Kind, opts Options) error {
	pkg, ok := packages[kind]
	if !ok {
		return fmt.Errorf("unknown kind %q", kind)
	}
	if os.Geteuid() != 0 {
		return errors.New("loop mounts need root (CI runs the tests as root); run the test with sudo")
	}
	if opts.Size < MinSize[kind] {
		return fmt.Errorf("size %d is below the %d bytes mkfs.%s accepts", opts.Size, MinSize[kind], kind)
	}
	if _, err := exec.LookPath("mkfs." + string(kind)); err != nil {
		return fmt.Errorf("mkfs.%s not found: install the Debian package %s (.ci/run does)", kind, pkg)
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Errorf("no loop driver: %w (modprobe loop)", err)
	}
	return nil
}

// makeImage creates a sparse image and formats it.
func makeImage(path string, kind Kind, opts Options) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(opts.Size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	base := mkfsArgs[kind]
	if kind == XFS && slices.Contains(opts.MkfsArgs, "-m") {
		base = []string{"-q", "-f"} // the caller's -m (reflink=0, say) replaces the default's
	}
	args := append(append(append([]string{}, base...), opts.MkfsArgs...), path)
	var out []byte
	for try := 0; ; try++ {
		out, err = exec.Command("mkfs."+string(kind), args...).CombinedOutput()
		// mkfs.btrfs looks at every loop device to see whether the image is
		// mounted; one that another test detaches meanwhile fails it with
		// ENXIO ("cannot check mount status"). That passes: try again.
		if err == nil || try == 4 || !strings.Contains(string(out), "cannot check mount status") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("mkfs.%s %s: %w: %s", kind, strings.Join(args, " "), err, trimmed(out))
	}
	return nil
}

func trimmed(out []byte) string { return strings.TrimSpace(string(out)) }

// attach binds the image to a free loop device. Another process may take
// the device the kernel offered between the two calls, so it asks again.
func (fs *FS) attach() error {
	img, err := os.OpenFile(fs.Image, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer img.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer ctl.Close()
	for range 100 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd()), Size: fs.opts.SectorSize}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], fs.Image)
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if err == nil {
			fs.Device, fs.loop = dev, loop
			return nil
		}
		loop.Close()
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("LOOP_CONFIGURE %s: %w", dev, err)
		}
	}
	return errors.New("every free loop device was taken by another process before this one")
}

func (fs *FS) mountDevice() error {
	err := unix.Mount(fs.Device, fs.Dir, string(fs.Kind), 0, fs.opts.MountOptions)
	if errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("the kernel has no %s support (modprobe %s): %w", fs.Kind, fs.Kind, err)
	}
	if err != nil {
		return fmt.Errorf("mount %s on %s: %w", fs.Device, fs.Dir, err)
	}
	return nil
}

// cleanup unmounts and detaches; whatever it cannot undo fails the test.
func (fs *FS) cleanup(t testing.TB) {
	if err := fs.unmount(); err != nil {
		t.Errorf("loopfs: %v", err)
	}
	if err := fs.detach(); err != nil {
		t.Errorf("loopfs: %v", err)
	}
}

// unmount unmounts the image if it is mounted. A busy one is tried again
// as Unmount does (seen once: a dedup conformance test's ext4 busy as it
// ended, beside the suite's other packages and a benchmark writing 1 GiB).
// A child that another test of the process forks, for one, holds a copy
// of every descriptor open at that moment until it execs, which on a
// loaded machine can outlast the close of the last file. One still busy
// then, kept by a leftover process, is detached lazily, and that is
// reported.
func (fs *FS) unmount() error {
	if !fs.Mounted() {
		return nil
	}
	err := unmountWhenFree(fs.Dir)
	if err == nil {
		return nil
	}
	if lerr := unix.Unmount(fs.Dir, unix.MNT_DETACH); lerr != nil {
		return fmt.Errorf("unmount %s: %v; lazily: %w", fs.Dir, err, lerr)
	}
	return fmt.Errorf("unmount %s: %w (a process still uses it; detached lazily)", fs.Dir, err)
}

// detach releases the loop device. Autoclear already did when the last
// user closed it; LOOP_CLR_FD covers an image that was never mounted.
func (fs *FS) detach() error {
	if fs.loop == nil {
		return nil
	}
	err := unix.IoctlSetInt(int(fs.loop.Fd()), unix.LOOP_CLR_FD, 0)
	if errors.Is(err, unix.ENXIO) {
		err = nil // not bound any more
	}
	if cerr := fs.loop.Close(); err == nil {
		err = cerr
	}
	fs.loop = nil
	if err != nil {
		return fmt.Errorf("detach %s: %w", fs.Device, err)
	}
	return nil
}

// Mounted reports whether the image is mounted on fs.Dir now. A file
// system shut down (Shutdown) answers stat with EIO: it is still mounted.
func (fs *FS) Mounted() bool {
	var dir, parent unix.Stat_t
	if err := unix.Stat(fs.Dir, &dir); err != nil {
		return errors.Is(err, unix.EIO)
	}
	if unix.Stat(filepath.Dir(fs.Dir), &parent) != nil {
		return false
	}
	return dir.Dev != parent.Dev
}

// Path joins elem to the mount point.
func (fs *FS) Path(elem ...string) string {
	return filepath.Join(append([]string{fs.Dir}, elem...)...)
}

// Unmount unmounts the image and keeps the device, so Mount can mount it
// again: a test's stand-in for a restart or a power cut's reboot. A file
// system busy for a moment (a daemon under test has one of its files open:
// a survey's, a hash's) is tried again for up to busyFor, as a user whose
// umount said "target is busy" tries again; one still busy then fails the
// test.
func (fs *FS) Unmount(t testing.TB) {
	t.Helper()
	if err := unmountWhenFree(fs.Dir); err != nil {
		t.Fatalf("loopfs: unmount %s: %v", fs.Dir, err)
	}
}

// busyFor is how long Unmount tries again a file system that is busy.
const busyFor = 10 * time.Second

// unmountWhenFree unmounts dir, trying again while it is busy, for up to
// busyFor.
func unmountWhenFree(dir string) error {
	deadline := time.Now().Add(busyFor)
	for {
		err := unix.Unmount(dir, 0)
		if !errors.Is(err, unix.EBUSY) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (still busy after %v: a file left open on it?)", err, busyFor)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Mount mounts the image again after Unmount.
func (fs *FS) Mount(t testing.TB) {
	t.Helper()
	if err := fs.mountDevice(); err != nil {
		t.Fatalf("loopfs: %v", err)
	}
}

// MountAt mounts the image at dir, which must exist, besides or instead of
// fs.Dir; it is unmounted when the test ends, if it still is mounted.
func (fs *FS) MountAt(t testing.TB, dir string) {
	t.Helper()
	if err := unix.Mount(fs.Device, dir, string(fs.Kind), 0, fs.opts.MountOptions); err != nil {
		t.Fatalf("loopfs: mount %s on %s: %v", fs.Device, dir, err)
	}
	t.Cleanup(func() {
		if err := unmountWhenFree(dir); err != nil && !errors.Is(err, unix.EINVAL) {
			t.Errorf("loopfs: unmount %s: %v", dir, err)
		}
	})
}

// Renumber unmounts the image, binds it to another loop device and mounts
// it again at the same place, as a reboot that numbers the devices anew
// does: the file system is the same, its st_dev is not.
func (fs *FS) Renumber(t testing.TB) {
	t.Helper()
	if fs.Mounted() {
		fs.Unmount(t)
	}
	old, oldDev := fs.loop, fs.Device
	fs.loop = nil
	// The old device stays bound until the new one is, so they differ.
	if err := fs.attach(); err != nil {
		t.Fatalf("loopfs: renumber %s: %v", oldDev, err)
	}
	if err := unix.IoctlSetInt(int(old.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		t.Errorf("loopfs: detach %s: %v", oldDev, err)
	}
	old.Close()
	fs.Mount(t)
}

// Shutdown stops the file system at once, without flushing its log, as
// `xfs_io -x -c shutdown` does (ext4 takes the same ioctl; btrfs has none).
// What the disk holds then is what a power cut would leave: nothing written
// after the journal's last commit, no data block not yet written back.
// Unmount and Mount replay the journal.
func (fs *FS) Shutdown(t testing.TB) {
	t.Helper()
	if out, err := exec.Command("xfs_io", "-x", "-c", "shutdown", fs.Dir).CombinedOutput(); err != nil {
		t.Fatalf("loopfs: xfs_io -x -c shutdown %s: %v: %s (xfs_io is in xfsprogs)", fs.Dir, err, trimmed(out))
	}
}

// Free returns the bytes free on the file system, from statfs after a
// syncfs, so space that delayed work frees is counted.
func (fs *FS) Free(t testing.TB) int64 {
	t.Helper()
	d, err := os.Open(fs.Dir)
	if err != nil {
		t.Fatalf("loopfs: %v", err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		t.Fatalf("loopfs: syncfs %s: %v", fs.Dir, err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(d.Fd()), &st); err != nil {
		t.Fatalf("loopfs: statfs %s: %v", fs.Dir, err)
	}
	return int64(st.Bfree) * st.Bsize
}

// Clone copies the image of fs, which must be unmounted, and binds the
// copy to a loop device of its own: a disk copied with dd, its UUID and
// all. Mount mounts the copy on a directory of its own, beside fs.
func (fs *FS) Clone(t testing.TB) *FS {
	t.Helper()
	if fs.Mounted() {
		t.Fatalf("loopfs: clone %s: unmount it first, so its image is whole", fs.Dir)
	}
	base := t.TempDir()
	c := &FS{Kind: fs.Kind, Dir: filepath.Join(base, "mnt"), Image: filepath.Join(base, "fs.img"), opts: fs.opts}
	if err := os.Mkdir(c.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "--sparse=always", fs.Image, c.Image).CombinedOutput(); err != nil {
		t.Fatalf("loopfs: cp %s %s: %v: %s", fs.Image, c.Image, err, trimmed(out))
	}
	if err := c.attach(); err != nil {
		t.Fatalf("loopfs: clone: %v", err)
	}
	t.Cleanup(func() { c.cleanup(t) })
	return c
}
