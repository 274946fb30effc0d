package directio

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
)

func random(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	_, _ = r.Read(b)
	return b
}

// cold writes data to path, syncs it and drops its pages.
func cold(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	fd := open(t, path)
	if err := unix.Fsync(fd); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// open opens path read-only for the test.
func open(t *testing.T, path string) int {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func devOf(t *testing.T, fd int) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Forget(st.Dev) })
	return st.Dev
}

func cachedPages(t *testing.T, fd int) uint64 {
	t.Helper()
	var cs unix.Cachestat_t
	if err := unix.Cachestat(uint(fd), &unix.CachestatRange{}, &cs, 0); err != nil {
		t.Fatalf("cachestat: %v", err)
	}
	return cs.Cache
}

// readAll reads the file open as fd directly, readSize bytes a call, as
// the audit does, and returns what it read.
func readAll(t *testing.T, f *File, size, readSize int) []byte {
	t.Helper()
	buf := Buffer(readSize)
	var out []byte
	for off := 0; off < size; {
		want := min(readSize, size-off)
		n, err := f.ReadAt(buf, int64(off), want)
		if err != nil || n < want {
			t.Fatalf("ReadAt(%d, %d): %d, %v", off, want, n, err)
		}
		out = append(out, buf[:want]...)
		off += want
	}
	return out
}

// Files of sizes that are no multiple of a block, of a page or of a read
// are read whole and right, straight from the device: no page is cached
// after. Every size rounds the last read up past the end of the file.
func TestReadAtSizes(t *testing.T) {
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	for i, n := range []int{1, 511, 4095, 4096, 4097, 1<<20 - 1, 1 << 20, 1<<20 + 1, 3<<20 + 17} {
		p := filepath.Join(fs.Dir, fmt.Sprint(i))
		data := random(n, uint64(i))
		cold(t, p, data)
		fd := open(t, p)
		f, err := Open(fd, devOf(t, fd))
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !f.Vouched() || f.Align() != MinAlign {
			t.Errorf("XFS with 512-byte sectors: vouched %v, alignment %d", f.Vouched(), f.Align())
		}
		if got := readAll(t, f, n, 1<<20); !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: read other bytes", n)
		}
		if c := cachedPages(t, fd); c != 0 {
			t.Errorf("%d bytes: %d pages cached after direct reads", n, c)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A device of 8 KiB logical blocks answers a 4 KiB read with EINVAL.
// Open takes the alignment statx reports; a File that starts too low
// doubles it after the EINVAL, and the device keeps what worked. A buffer
// too short for it is refused, without taking the device for one that
// refuses direct reads.
func TestReadAtLargerSectors(t *testing.T) {
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20, SectorSize: 8192,
		MkfsArgs: []string{"-b", "size=8192", "-s", "size=8192"}})
	p := filepath.Join(fs.Dir, "f")
	data := random(20000, 1)
	cold(t, p, data)
	fd := open(t, p)
	dev := devOf(t, fd)
	f, err := Open(fd, dev)
	if err != nil || f.Align() != 8192 {
		t.Fatalf("Open: %v, alignment %d; want 8192 from statx", err, f.Align())
	}
	f.align = MinAlign // as if statx had not said
	var einval int
	testHookRead = func(align, n int, err error) (int, error) {
		if err == unix.EINVAL {
			einval++
		}
		return n, err
	}
	t.Cleanup(func() { testHookRead = nil })
	if got := readAll(t, f, len(data), 1<<20); !bytes.Equal(got, data) || einval != 1 || f.Align() != 8192 {
		t.Fatalf("read right %v, %d EINVAL, alignment %d; want one EINVAL, then 8192", bytes.Equal(got, data), einval, f.Align())
	}
	if v, _ := devs.Load(dev); v != 8192 {
		t.Errorf("the device keeps alignment %v", v)
	}
	if n, err := f.ReadAt(Buffer(4096), 0, 3000); !errors.Is(err, ErrRefused) || Refused(dev) {
		t.Errorf("a 4 KiB buffer: %d, %v; device refused %v", n, err, Refused(dev))
	}
	f2, err := Open(fd, dev)
	if err != nil || f2.Align() != 8192 {
		t.Fatalf("Open again: %v, alignment %d", err, f2.Align())
	}
}

// A file that grew since its size was taken reads longer than asked, to
// the rounded length; one that shrank reads shorter.
func TestReadAtGrowsAndShrinks(t *testing.T) {
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	p := filepath.Join(fs.Dir, "f")
	cold(t, p, random(5000, 2))
	fd := open(t, p)
	f, err := Open(fd, devOf(t, fd))
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(random(100, 3)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	buf := Buffer(1 << 20)
	if n, err := f.ReadAt(buf, 0, 5000); n != 5100 || err != nil {
		t.Errorf("grown: %d, %v; want 5100", n, err)
	}
	if err := os.Truncate(p, 3000); err != nil {
		t.Fatal(err)
	}
	if n, err := f.ReadAt(buf, 0, 5000); n != 3000 || err != nil {
		t.Errorf("shrunk: %d, %v; want 3000", n, err)
	}
}

// A direct read of a file whose pages are dirty returns the new bytes:
// the kernel writes the range back first. So it is for write(2) and for
// a write through a shared mapping, without fsync or msync.
func TestReadAtDirtyPages(t *testing.T) {
	for _, kind := range []loopfs.Kind{loopfs.Ext4, loopfs.XFS} {
		t.Run(string(kind), func(t *testing.T) {
			fs := loopfs.New(t, kind, loopfs.Options{Size: loopfs.MinSize[kind]})
			p := filepath.Join(fs.Dir, "f")
			const size = 3<<20 + 5
			cold(t, p, random(size, 4))
			fd := open(t, p)
			dev := devOf(t, fd)

			w, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			edit := random(10000, 5)
			if _, err := w.WriteAt(edit, 1<<20-100); err != nil {
				t.Fatal(err)
			}
			var cs unix.Cachestat_t
			if err := unix.Cachestat(uint(fd), &unix.CachestatRange{}, &cs, 0); err != nil || cs.Dirty == 0 {
				t.Fatalf("no dirty pages after the write: %+v %v", cs, err)
			}
			want, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Open(fd, dev)
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, f, size, 1<<20); !bytes.Equal(got, want) {
				t.Fatal("a direct read of dirty pages returned other bytes than the page cache holds")
			}

			m, err := unix.Mmap(int(w.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(m)
			copy(m[2<<20:], "written through a mapping, not synced")
			copy(want[2<<20:], "written through a mapping, not synced")
			if got := readAll(t, f, size, 1<<20); !bytes.Equal(got, want) {
				t.Fatal("a direct read after a write through a mapping returned other bytes")
			}
		})
	}
}

// A file system that refuses O_DIRECT (procfs) is refused, and so is
// its device from then on. A file that statx says cannot be read
// directly (inline data on ext4) is refused alone.
func TestOpenRefused(t *testing.T) {
	fd := open(t, "/proc/self/status")
	dev := devOf(t, fd)
	if _, err := Open(fd, dev); !errors.Is(err, ErrRefused) || !Refused(dev) {
		t.Fatalf("procfs: %v, refused %v", err, Refused(dev))
	}
	if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); fl&unix.O_DIRECT != 0 {
		t.Error("O_DIRECT left set")
	}

	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20, MkfsArgs: []string{"-O", "inline_data", "-I", "1024"}})
	small, big := filepath.Join(fs.Dir, "small"), filepath.Join(fs.Dir, "big")
	cold(t, small, []byte("inline"))
	cold(t, big, random(100000, 6))
	sfd, bfd := open(t, small), open(t, big)
	sdev := devOf(t, sfd)
	if _, err := Open(sfd, sdev); !errors.Is(err, ErrRefused) || Refused(sdev) {
		t.Fatalf("inline data: %v, device refused %v", err, Refused(sdev))
	}
	if f, err := Open(bfd, sdev); err != nil || !f.Vouched() {
		t.Fatalf("a file in blocks on the same device: %v", err)
	}
}

// Memory file systems have no device; btrfs keeps compressed extents
// where a direct read cannot reach them, and XFS keeps none.
func TestBackingAndThroughCache(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "directio")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	cold(t, filepath.Join(shm, "f"), []byte("in memory"))
	if b, name := BackingOf(open(t, filepath.Join(shm, "f"))); b != Memory || name != "tmpfs" {
		t.Errorf("tmpfs: %v %q", b, name)
	}

	x := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	cold(t, filepath.Join(x.Dir, "f"), random(100000, 7))
	xfd := open(t, filepath.Join(x.Dir, "f"))
	if b, _ := BackingOf(xfd); b != Disk {
		t.Errorf("XFS: %v", b)
	}
	if through, known := ThroughCache(xfd); through || !known {
		t.Errorf("XFS: through the cache %v, known %v", through, known)
	}

	b := loopfs.New(t, loopfs.Btrfs, loopfs.Options{Size: 128 << 20, MountOptions: "compress-force=zstd"})
	text := bytes.Repeat([]byte("a line of text that compresses well\n"), 10000)
	cold(t, filepath.Join(b.Dir, "text"), text)
	if through, known := ThroughCache(open(t, filepath.Join(b.Dir, "text"))); !through || !known {
		t.Errorf("btrfs, compressed: through the cache %v, known %v", through, known)
	}
}

// Buffer is aligned and as long as asked, rounded up.
func TestBuffer(t *testing.T) {
	for _, n := range []int{1, 4096, 5000, 1 << 20} {
		b := Buffer(n)
		if !Aligned(b) || len(b) != Round(n, MinAlign) || uintptr(unsafe.Pointer(&b[0]))%MinAlign != 0 {
			t.Errorf("Buffer(%d): len %d at %p", n, len(b), &b[0])
		}
	}
}

// Buffers lays out its buffers one after the other from a huge page's
// boundary, each aligned and of the rounded size, none overlapping the
// next; direct reads into them return the file.
func TestBuffers(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ count, size int }{{1, 1}, {2, 1 << 20}, {3, 2 << 20}, {2, 5000}} {
		bufs := Buffers(c.count, c.size)
		want := Round(c.size, MinAlign)
		if len(bufs) != c.count {
			t.Fatalf("Buffers(%d, %d): %d buffers", c.count, c.size, len(bufs))
		}
		first := uintptr(unsafe.Pointer(&bufs[0][0]))
		if first%HugePage != 0 {
			t.Errorf("Buffers(%d, %d): the first at %#x, not on a huge page's boundary", c.count, c.size, first)
		}
		for i, b := range bufs {
			at := uintptr(unsafe.Pointer(&b[0]))
			if !Aligned(b) || len(b) != want || cap(b) != want || at != first+uintptr(i*want) {
				t.Errorf("Buffers(%d, %d)[%d]: len %d cap %d at %#x", c.count, c.size, i, len(b), cap(b), at)
			}
		}
		path := filepath.Join(dir, fmt.Sprint(c.count, "-", c.size))
		data := random(c.count*want-7, uint64(c.size))
		cold(t, path, data)
		f, err := Open(open(t, path), 0)
		if err != nil {
			t.Skipf("no direct reads here: %v", err)
		}
		var got []byte
		for i, b := range bufs {
			n, err := f.ReadAt(b, int64(i*want), min(want, len(data)-i*want))
			if err != nil {
				t.Fatalf("%s: read %d: %v", path, i, err)
			}
			got = append(got, b[:n]...)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s: the buffers' reads differ from the file", path)
		}
	}
}

// Where the kernel has transparent huge pages for those who ask, the
// buffers get them: a 2 MiB buffer touched is one huge page, unless the
// kernel counted a fallback to ordinary pages (no free huge page).
func TestBuffersGetHugePages(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || bytes.Contains(mode, []byte("[never]")) {
		t.Skipf("no transparent huge pages for madvise here: %q %v", mode, err)
	}
	for round := range 3 {
		// Memory the heap used before, mapped in ordinary pages, is what a
		// long-running process gets back most of the time.
		for _, n := range []int{HugePage + 4096, 3 * HugePage, 5 * HugePage} {
			used := make([]byte, n)
			for i := 0; i < len(used); i += 4096 {
				used[i] = 1
			}
			runtime.KeepAlive(used)
		}
		runtime.GC()
		fallbacks := vmstat(t, "thp_fault_fallback") + vmstat(t, "thp_collapse_alloc_failed")
		b := Buffers(1, HugePage)[0]
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		huge := anonHugeKiB(t, uintptr(unsafe.Pointer(&b[0])))
		switch {
		case huge >= HugePage>>10:
		case vmstat(t, "thp_fault_fallback")+vmstat(t, "thp_collapse_alloc_failed") > fallbacks:
			t.Skipf("round %d: the kernel had no huge page to give (its fallback counts rose); AnonHugePages %d kB", round, huge)
		default:
			t.Errorf("round %d: the buffer's mapping holds %d kB of huge pages, want %d, and the kernel counted no fallback",
				round, huge, HugePage>>10)
		}
		runtime.KeepAlive(b)
	}
}

// vmstat reads one counter of /proc/vmstat.
func vmstat(t *testing.T, name string) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(data) {
		var n int64
		if _, err := fmt.Sscanf(string(line), name+" %d", &n); err == nil {
			return n
		}
	}
	t.Fatalf("no %s in /proc/vmstat", name)
	return 0
}

// anonHugeKiB is AnonHugePages of the mapping of this process that holds addr.
func anonHugeKiB(t *testing.T, addr uintptr) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	in := false
	for line := range bytes.Lines(data) {
		var lo, hi uintptr
		if _, err := fmt.Sscanf(string(line), "%x-%x ", &lo, &hi); err == nil {
			in = lo <= addr && addr < hi
			continue
		}
		var kb int64
		if _, err := fmt.Sscanf(string(line), "AnonHugePages: %d kB", &kb); err == nil && in {
			return kb
		}
	}
	t.Fatalf("no mapping of this process holds %#x", addr)
	return 0
}
