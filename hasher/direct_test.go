package hasher

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/directio"
	"github.com/annexd/annexd/internal/durable"
	"github.com/annexd/annexd/internal/loopfs"
)

// coldFiles writes files of the given sizes on a fresh XFS image, syncs
// them and drops them from the page cache.
func coldFiles(t *testing.T, sizes ...int) (paths []string, sums [][32]byte) {
	t.Helper()
	img := newLoop(t, loopfs.XFS)
	for i, n := range sizes {
		data := pattern(n)
		p := filepath.Join(img.Dir, fmt.Sprintf("f%03d.bin", i))
		writeFile(t, p, data)
		paths = append(paths, p)
		sums = append(sums, sha256.Sum256(data))
	}
	syncDir(t, img.Dir)
	for _, p := range paths {
		dropCache(t, p)
	}
	return paths, sums
}

// dropCache drops path's pages from the page cache, and checks that
// cachestat(2) sees none left.
func dropCache(t *testing.T, path string) {
	t.Helper()
	fd := mustOpen(t, path)
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if n := cached(t, path); n != 0 {
		t.Fatalf("%s: %d pages still cached after FADV_DONTNEED", path, n)
	}
}

// cached returns how many pages of path the page cache holds.
func cached(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(mustOpen(t, path)), &unix.CachestatRange{}, &st, 0); err != nil {
		t.Skipf("cachestat(2): %v", err)
	}
	return st.Cache
}

// directReads counts the direct reads for the test, letting hook change
// their results.
func directReads(t *testing.T, hook func(path string, n int, err error) (int, error)) *atomic.Int64 {
	t.Helper()
	var count atomic.Int64
	testHookDirect = func(path string, n int, err error) (int, error) {
		count.Add(1)
		if hook != nil {
			return hook(path, n, err)
		}
		return n, err
	}
	t.Cleanup(func() { testHookDirect = nil })
	return &count
}

// laneHasher hashes small files in the lanes, every ctime counting as
// old, so that small files are read as readOpen reads them.
func laneHasher(t *testing.T) (*Hasher, *serialEngine) {
	eng := &serialEngine{lanes: 4}
	h := New(Policy{InlineMax: 100 << 10, Workers: 1, Batch: eng.factory(), BatchMinStreams: 1, SyncWindow: time.Nanosecond}, nil)
	t.Cleanup(func() { h.Close() })
	return h, eng
}

// Small files none of whose pages is cached are read straight from the
// disk: their digests are right and they are still not in the page cache
// after. A cached one is read from the cache.
func TestColdSmallFilesReadDirect(t *testing.T) {
	paths, sums := coldFiles(t, 1, 4095, 4096, 10000, 64<<10)
	direct := directReads(t, nil)
	h, eng := laneHasher(t)
	hashAll(t, h, paths, sums)
	if direct.Load() != int64(len(paths)) || eng.fromMemory() != len(paths) {
		t.Fatalf("%d direct reads, %d files in memory; want %d of each", direct.Load(), eng.fromMemory(), len(paths))
	}
	noneCached(t, paths)
	hashCachedUncounted(t, h, paths[3], sums[3], direct)
}

// noneCached fails for each of paths the page cache holds pages of.
func noneCached(t *testing.T, paths []string) {
	t.Helper()
	for _, p := range paths {
		if n := cached(t, p); n != 0 {
			t.Errorf("%s: %d pages cached after its direct reads", filepath.Base(p), n)
		}
	}
}

// hashCachedUncounted reads path into the page cache, hashes it again
// and fails unless count stays 0: a cached file is read the usual way.
func hashCachedUncounted(t *testing.T, h *Hasher, path string, sum [32]byte, count *atomic.Int64) {
	t.Helper()
	if _, err := os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	count.Store(0)
	hashAll(t, h, []string{path}, [][32]byte{sum})
	if n := count.Load(); n != 0 {
		t.Errorf("%s, cached, read directly (%d)", filepath.Base(path), n)
	}
}

// On a device whose logical blocks are 8 KiB, a 4 KiB read is EINVAL. A
// small file whose buffer holds 8 KiB is read directly all the same; one
// whose buffer holds only 4 KiB is read the usual way, with the right
// digest, and the device is not taken as one that refuses direct reads.
func TestDirectReadLargerSectors(t *testing.T) {
	img := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 512 << 20, SectorSize: 8192,
		MkfsArgs: []string{"-b", "size=8192", "-s", "size=8192"}})
	t.Cleanup(durable.WaitEpochs)
	var paths []string
	var sums [][32]byte
	for i, n := range []int{3000, 5000} { // buffers of 4 KiB and 8 KiB
		data := pattern(n)
		p := filepath.Join(img.Dir, fmt.Sprintf("f%d.bin", i))
		writeFile(t, p, data)
		paths = append(paths, p)
		sums = append(sums, sha256.Sum256(data))
	}
	syncDir(t, img.Dir)
	for _, p := range paths {
		dropCache(t, p)
	}
	fi, err := fsstat.Lstat(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { directio.Forget(fi.Dev) })
	var ok atomic.Int64
	direct := directReads(t, func(path string, n int, err error) (int, error) {
		if err == nil {
			ok.Add(1)
		}
		return n, err
	})
	h, eng := laneHasher(t)
	hashAll(t, h, paths, sums)
	if direct.Load() != 2 || ok.Load() != 1 || eng.fromMemory() != 2 {
		t.Fatalf("%d direct reads, %d of them read, %d files in memory; want 2, 1 and 2", direct.Load(), ok.Load(), eng.fromMemory())
	}
	if directio.Refused(fi.Dev) {
		t.Error("the device is taken as one that refuses direct reads")
	}
	if n := cached(t, paths[1]); n != 0 {
		t.Errorf("the file read directly left %d pages cached", n)
	}
}

// A file that grew after its stat is not hashed by the recorded size:
// its direct read returns more than that, the buffered read that follows
// stops at the size, and the check after reading reports the change.
func TestDirectReadSeesGrowth(t *testing.T) {
	paths, _ := coldFiles(t, 5000)
	before, err := fsstat.Lstat(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(paths[0], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(pattern(100)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dropCache(t, paths[0])
	var got int
	directReads(t, func(_ string, n int, err error) (int, error) {
		got = n
		return n, err
	})
	fd, err := unix.Open(paths[0], unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sf := &stableFile{path: paths[0], fd: fd, before: before}
	defer sf.close()
	_, _, err = readOpen(context.Background(), sf, readOpts{syncWindow: time.Nanosecond})
	var ce *ChangedError
	if got != 5100 || !errors.As(err, &ce) {
		t.Fatalf("direct read %d bytes, error %v; want 5100 and a change", got, err)
	}
}
