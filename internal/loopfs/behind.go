package loopfs

import (
	"encoding/binary"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Physical returns where byte 0 of the file at path lies on its file
// system's device, and how many bytes from there are the file's
// (FS_IOC_FIEMAP, after syncing the file).
func Physical(t testing.TB, path string) (at, n int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const (
		fsIocFiemap     = 0xC020660B
		fiemapFlagSync  = 1
		headerSize      = 32
		extentSize      = 56
		extentPhysicalO = 8
	)
	buf := make([]byte, headerSize+extentSize)
	binary.LittleEndian.PutUint64(buf[8:], ^uint64(0)) // fm_length: all of it
	binary.LittleEndian.PutUint32(buf[16:], fiemapFlagSync)
	binary.LittleEndian.PutUint32(buf[24:], 1) // fm_extent_count
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
		t.Fatalf("FIEMAP %s: %v", path, e)
	}
	if binary.LittleEndian.Uint32(buf[20:]) == 0 {
		t.Fatalf("FIEMAP %s: no extent", path)
	}
	ext := buf[headerSize:]
	if logical := binary.LittleEndian.Uint64(ext); logical != 0 {
		t.Fatalf("FIEMAP %s: first extent at %d", path, logical)
	}
	return int64(binary.LittleEndian.Uint64(ext[extentPhysicalO:])), int64(binary.LittleEndian.Uint64(ext[16:]))
}

// FlipByte inverts byte off of the file at path in the image, behind the
// file system's back: no write(2), no event, stat unchanged. The file's
// cached pages are dropped, so the next read comes from the image.
func (fs *FS) FlipByte(t testing.TB, path string, off int64) {
	t.Helper()
	at, _ := Physical(t, path)
	b := make([]byte, 1)
	img := fs.openImage(t)
	if _, err := img.ReadAt(b, at+off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	fs.writeImage(t, path, at+off, b)
}

// FlipByteUnderCache inverts byte off of the file at path in the image as
// FlipByte does, but leaves the file's cached pages as they are: they keep
// the old byte, as RAM does when the disk under it rots. Only a read that
// bypasses the page cache (O_DIRECT) sees the flip until the pages go.
func (fs *FS) FlipByteUnderCache(t testing.TB, path string, off int64) {
	t.Helper()
	at, _ := Physical(t, path)
	img := fs.openImage(t)
	b := make([]byte, 1)
	if _, err := img.ReadAt(b, at+off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := img.WriteAt(b, at+off); err != nil {
		t.Fatal(err)
	}
	if err := img.Sync(); err != nil {
		t.Fatal(err)
	}
}

// WriteBehind puts data at the start of the file at path in the image,
// behind the file system's back, as FlipByte does; the file must lie in
// one extent.
func (fs *FS) WriteBehind(t testing.TB, path string, data []byte) {
	t.Helper()
	at, n := Physical(t, path)
	if n < int64(len(data)) {
		t.Fatalf("%s is not in one extent (%d bytes from %d)", path, n, at)
	}
	fs.writeImage(t, path, at, data)
}

// Sync writes everything the file system holds back to its image.
func (fs *FS) Sync(t testing.TB) {
	t.Helper()
	f, err := os.Open(fs.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
}

func (fs *FS) openImage(t testing.TB) *os.File {
	t.Helper()
	img, err := os.OpenFile(fs.Image, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { img.Close() })
	return img
}

// writeImage writes b at offset at of the image, syncs it and drops the
// cached pages of path.
func (fs *FS) writeImage(t testing.TB, path string, at int64, b []byte) {
	t.Helper()
	img := fs.openImage(t)
	if _, err := img.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	if err := img.Sync(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}
