package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// LoopFS is a file system in a sparse image file, mounted through a loop
// device that mount -o loop frees again at unmount.
type LoopFS struct {
	Type  string // "xfs" or "ext4"
	Image string // the image file
	Dir   string // the mount point

	mounted bool
}

// MountLoop makes a fresh file system of type fstype ("xfs" or "ext4") in
// a 512 MiB sparse image under dir and mounts it at dir/mnt. The test
// fails, loudly, when it cannot (not root, no mkfs, no loop devices). At
// cleanup a file system still mounted is unmounted lazily, so that a busy
// mount cannot keep its loop device.
func MountLoop(t testing.TB, dir, fstype string) *LoopFS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test mounts a loop-mounted %s image and must run as root (CI does); run it with sudo", fstype)
	}
	l := &LoopFS{Type: fstype, Image: filepath.Join(dir, fstype+".img"), Dir: filepath.Join(dir, "mnt")}
	if err := os.Mkdir(l.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.Image, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(l.Image, 512<<20); err != nil {
		t.Fatal(err)
	}
	switch fstype {
	case "xfs":
		Run(t, "mkfs.xfs", "-q", "-f", l.Image)
	case "ext4":
		Run(t, "mkfs.ext4", "-q", "-F", l.Image)
	default:
		t.Fatalf("MountLoop: unknown file system %q", fstype)
	}
	t.Cleanup(func() {
		if l.mounted {
			if err := unix.Unmount(l.Dir, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", l.Dir, err)
			}
		}
	})
	l.Mount(t)
	return l
}

// Mount mounts the image.
func (l *LoopFS) Mount(t testing.TB) {
	t.Helper()
	Run(t, "mount", "-t", l.Type, "-o", "loop", l.Image, l.Dir)
	l.mounted = true
}

// Unmount unmounts it.
func (l *LoopFS) Unmount(t testing.TB) {
	t.Helper()
	Run(t, "umount", l.Dir)
	l.mounted = false
}

// Shutdown stops the file system at once without flushing its log, which
// leaves on disk what a power cut would (xfs_io's shutdown; ext4 takes
// the same ioctl). Nothing written after the last journal commit, and no
// data block not yet written back, survives the next mount.
func (l *LoopFS) Shutdown(t testing.TB) {
	t.Helper()
	Run(t, "xfs_io", "-x", "-c", "shutdown", l.Dir)
}

// PowerCut is Shutdown, then Unmount and Mount: the file system as it is
// after the power came back and its journal was replayed.
func (l *LoopFS) PowerCut(t testing.TB) {
	t.Helper()
	l.Shutdown(t)
	l.Unmount(t)
	l.Mount(t)
}

// Syncfs writes everything cached for the file system to its disk.
func (l *LoopFS) Syncfs(t testing.TB) {
	t.Helper()
	fd, err := unix.Open(l.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		t.Fatalf("syncfs %s: %v", l.Dir, err)
	}
}

// Run runs a program and fails the test, with its output, when it fails.
func Run(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
