package hasher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/durable"
	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/key"
)

// A file rewritten in place and hashed on any route keeps, after a power
// cut, the bytes whose digest the hasher returned. The same rewrite hashed
// without the sync, on a file system of its own (a syncfs of the others
// must not save it), loses them, which shows the cut is real.
func TestHashedDataSurvivesPowerCut(t *testing.T) {
	sha256sum := lookPath(t, "sha256sum")
	routes := map[string]*Policy{ // nil: HashFile
		"hashfile": nil,
		"inline":   {InlineMax: 1 << 30},
		"pool":     {InlineMax: -1, Workers: 2},
		"batch":    {InlineMax: -1, Batch: MultiBuffer, BatchMinStreams: 1},
		"external": {InlineMax: -1, ExternalMin: 1, External: sha256sum},
		"nosync":   {InlineMax: -1, SyncWindow: -1},
	}
	for _, fstype := range []string{"xfs", "ext4"} {
		t.Run(fstype, func(t *testing.T) {
			img := newLoop(t, loopfs.Kind(fstype))
			control := newLoop(t, loopfs.Kind(fstype))
			files := map[string][]string{}
			for name := range routes {
				dir := img.Dir
				if name == "nosync" {
					dir = control.Dir
				}
				for i := range 8 {
					p := filepath.Join(dir, name, fmt.Sprintf("f%d", i))
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					writeFile(t, p, pattern(64<<10+i*4096))
					files[name] = append(files[name], p)
				}
			}
			syncDir(t, img.Dir)
			syncDir(t, control.Dir)
			hashed := map[string][]byte{}
			for name, p := range routes {
				hash := func(path string) (Result, error) { return HashFile(context.Background(), path, key.SHA256) }
				if p != nil {
					h := New(*p, nil)
					defer h.Close()
					hash = func(path string) (Result, error) { return h.Hash(context.Background(), path, key.SHA256) }
				}
				for i, path := range files[name] {
					overwrite(t, path, byte(i+1))
					res, err := hash(path)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					hashed[path] = res.Digest
				}
			}
			durable.WaitEpochs() // its descriptor would keep the mount busy
			commitJournal(t, img.Dir)
			commitJournal(t, control.Dir)
			powerCut(t, img)
			powerCut(t, control)
			lost := 0
			for name, paths := range files {
				for _, path := range paths {
					data, err := os.ReadFile(path)
					if err != nil {
						t.Fatal(err)
					}
					sum := sha256.Sum256(data)
					switch {
					case name == "nosync" && !bytes.Equal(sum[:], hashed[path]):
						lost++
					case name != "nosync" && !bytes.Equal(sum[:], hashed[path]):
						t.Errorf("%s, hashed on route %s: the disk holds %x after the cut, the hasher said %x", path, name, sum, hashed[path])
					}
				}
			}
			if lost == 0 {
				t.Errorf("no unsynced rewrite was lost by the cut: the test cannot tell a sync from none")
			}
		})
	}
}

// overwrite rewrites the first bytes of path in place, same size, no fsync.
func overwrite(t *testing.T, path string, b byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte{b}, 8192), 0); err != nil {
		t.Fatal(err)
	}
}

// commitJournal has another file fsync'ed, as any program may do: the
// journal commits the rewritten files' new timestamps with it.
func commitJournal(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "other.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("x")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// A file is synced when its ctime is recent, or when the page cache holds
// dirty pages of it although its ctime is old; a clean, old file is not.
func TestSyncsOnlyWhatMayBeDirty(t *testing.T) {
	img := newLoop(t, loopfs.Ext4)
	var synced atomic.Int64
	testHookSync = func(string) { synced.Add(1) }
	defer func() { testHookSync = nil }()
	path := filepath.Join(img.Dir, "f.bin")
	writeFile(t, path, pattern(100<<10))
	hash := func(window time.Duration) int64 {
		t.Helper()
		before := synced.Load()
		if _, err := hashFile(context.Background(), path, key.SHA256, nil, readOpts{syncWindow: window}); err != nil {
			t.Fatal(err)
		}
		return synced.Load() - before
	}
	if n := hash(0); n != 1 {
		t.Errorf("a file written just now: %d syncs, want 1", n)
	}
	if n := hash(-1); n != 0 {
		t.Errorf("syncing turned off: %d syncs", n)
	}
	// With a window of 1 ns every ctime is old: only the page cache's
	// word can ask for a sync now.
	if n := hash(time.Nanosecond); n != 0 {
		t.Errorf("an old file already synced: %d syncs, want 0", n)
	}
	overwrite(t, path, 7)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	cachestatWorks := durable.Dirty(int(f.Fd()))
	f.Close()
	want := int64(0)
	if cachestatWorks {
		want = 1
	} else {
		t.Logf("cachestat(2) cannot see dirty pages on this kernel: an old file's dirty pages go unseen")
	}
	if n := hash(time.Nanosecond); n != want {
		t.Errorf("an old file with dirty pages (cachestat works: %v): %d syncs, want %d", cachestatWorks, n, want)
	}
}

// A file whose data cannot be made durable gets no digest: the error of
// the sync is returned, naming the file.
func TestSyncFailureGivesNoDigest(t *testing.T) {
	img := newLoop(t, loopfs.XFS)
	path := filepath.Join(img.Dir, "f.bin")
	writeFile(t, path, pattern(4096))
	testHookRead = func(string) { img.Shutdown(t) }
	res, err := HashFile(context.Background(), path, key.SHA256)
	testHookRead = nil
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Op != "fdatasync" || pe.Path != path || !errors.Is(err, syscall.EIO) || res.Digest != nil {
		t.Fatalf("got digest %x, error %v; want fdatasync's EIO for %s and no digest", res.Digest, err, path)
	}
}

// After durable.EpochAfter files of a file system were synced one by one, an epoch
// syncs it all; the files last changed well before that epoch began are
// then not synced again, and still survive a power cut with the bytes the
// hasher hashed. A file changed after the epoch began is synced.
func TestEpochCoversOlderFiles(t *testing.T) {
	// A loop device's number comes back in the next test: start afresh.
	const coverMargin = 100 * time.Millisecond
	defer durable.ResetForTest(coverMargin)()
	img := newLoop(t, loopfs.Ext4)
	var synced atomic.Int64
	testHookSync = func(string) { synced.Add(1) }
	defer func() { testHookSync = nil }()
	var paths []string
	for i := range durable.EpochAfter + 8 {
		p := filepath.Join(img.Dir, fmt.Sprintf("f%02d", i))
		writeFile(t, p, pattern(32<<10+i))
		paths = append(paths, p)
	}
	time.Sleep(2 * coverMargin) // older than the margin when the epoch begins
	hashed := map[string][]byte{}
	hash := func(p string) {
		t.Helper()
		res, err := HashFile(context.Background(), p, key.SHA256)
		if err != nil {
			t.Fatal(err)
		}
		hashed[p] = res.Digest
	}
	for _, p := range paths[:durable.EpochAfter] {
		hash(p)
	}
	if n := synced.Load(); n != durable.EpochAfter {
		t.Fatalf("%d syncs for the first %d files, want one each", n, durable.EpochAfter)
	}
	durable.WaitEpochs()
	for _, p := range paths[durable.EpochAfter : len(paths)-1] {
		hash(p)
	}
	if n := synced.Load(); n != durable.EpochAfter {
		t.Errorf("%d syncs after the epoch for files it covers, want none", n-durable.EpochAfter)
	}
	last := paths[len(paths)-1]
	overwrite(t, last, 9)
	hash(last)
	if n := synced.Load(); n != durable.EpochAfter+1 {
		t.Errorf("a file changed after the epoch began: %d syncs, want 1", n-durable.EpochAfter)
	}
	durable.WaitEpochs()
	commitJournal(t, img.Dir)
	powerCut(t, img)
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(data); !bytes.Equal(sum[:], hashed[p]) {
			t.Errorf("%s: the disk holds %x after the cut, the hasher said %x", p, sum, hashed[p])
		}
	}
}

// newLoop mounts a fresh 512 MiB (sparse) image of kind for the test
// (internal/loopfs). Before it is unmounted, the epochs running end: their
// descriptors would keep it busy.
func newLoop(t testing.TB, kind loopfs.Kind) *loopfs.FS {
	t.Helper()
	fs := loopfs.New(t, kind, loopfs.Options{Size: 512 << 20})
	t.Cleanup(durable.WaitEpochs)
	return fs
}

// powerCut is a power cut and the reboot after it: the file system stops
// without flushing its log, then is mounted again (journal replayed).
func powerCut(t *testing.T, fs *loopfs.FS) {
	t.Helper()
	fs.Shutdown(t)
	fs.Unmount(t)
	fs.Mount(t)
}

// syncDir writes everything cached for the file system holding dir.
func syncDir(t testing.TB, dir string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		t.Fatalf("syncfs %s: %v", dir, err)
	}
}

// A small file read for the lanes is made durable like an inline one: a
// file written just now is synced before its bytes go to the engine.
func TestLanesSyncRecentFiles(t *testing.T) {
	var synced atomic.Int64
	testHookSync = func(string) { synced.Add(1) }
	defer func() { testHookSync = nil }()
	paths, sums := makeFiles(t, 1, 3000)
	eng := &serialEngine{lanes: 4}
	h := New(Policy{InlineMax: 100 << 10, Workers: 1, Batch: eng.factory(), BatchMinStreams: 1}, nil)
	defer h.Close()
	hashAll(t, h, paths, sums)
	if synced.Load() != 1 || eng.fromMemory() != 1 {
		t.Fatalf("%d syncs, %d files from memory; want the new file synced and hashed in a lane", synced.Load(), eng.fromMemory())
	}
}

// lookInCache sees a file read into the page cache, and one dropped from
// it; and whether it has dirty pages, which makeDurable then trusts.
func TestLookInCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, bytes.Repeat([]byte("x"), 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	look := func() (*stableFile, bool) {
		sf := &stableFile{path: path, fd: fd, before: fsstat.FileInfo{Size: 1 << 20}}
		return sf, sf.lookInCache()
	}
	sf, cached := look()
	if _, works := durable.Cachestat(fd); !works {
		if cached || sf.cache != cacheUnseen {
			t.Errorf("without cachestat(2): in cache %v, seen %v", cached, sf.cache)
		}
		return // the advice is always given, and makeDurable asks again
	}
	// Writeback may clean the pages before the look: only pages still
	// dirty after it prove they were dirty at it.
	if !cached || (sf.cache != cacheDirty && durable.Dirty(fd)) || sf.dirtyInCache() != (sf.cache == cacheDirty) {
		t.Errorf("a file just written: in cache %v, seen %v; want all cached and dirty", cached, sf.cache)
	}
	if err := unix.Fdatasync(fd); err != nil {
		t.Fatal(err)
	}
	if sf, cached = look(); !cached || sf.cache != cacheClean || sf.dirtyInCache() {
		t.Errorf("a file synced: in cache %v, seen %v; want all cached and clean", cached, sf.cache)
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if _, cached = look(); cached {
		t.Error("a file dropped from the page cache is seen wholly in it")
	}
}

// A file hashed as a lane's stream whose ctime is older than the window
// but whose pages are dirty is synced: the look before reading, which
// also decides the read-ahead, tells makeDurable. Writeback may clean the
// pages before the look; a try where it did proves nothing and is done
// again, one where they were still dirty after hashing without a sync
// fails (pages do not turn dirty again without a write).
func TestLanesSyncOldDirtyFiles(t *testing.T) {
	var synced atomic.Int64
	testHookSync = func(string) { synced.Add(1) }
	defer func() { testHookSync = nil }()
	const size = 300 << 10
	paths, sums := makeFiles(t, 1, size)
	eng := &serialEngine{lanes: 4}
	h := New(Policy{InlineMax: 100 << 10, Workers: 1, Batch: eng.factory(), BatchMinStreams: 1, SyncWindow: time.Nanosecond}, nil)
	defer h.Close()
	fd := mustOpen(t, paths[0])
	for try := 0; ; try++ {
		// Dirty again with the same bytes, without truncating: a truncated
		// file is written back on close.
		wfd, err := unix.Open(paths[0], unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = unix.Pwrite(wfd, pattern(size)[:8192], 0)
		unix.Close(wfd)
		if err != nil {
			t.Fatal(err)
		}
		if !durable.Dirty(fd) {
			t.Skip("cachestat(2) cannot see dirty pages here: an old file's dirty pages go unseen")
		}
		synced.Store(0)
		hashAll(t, h, paths, sums)
		if synced.Load() == 1 {
			break
		}
		if durable.Dirty(fd) {
			t.Fatalf("%d syncs of a streamed file whose pages stayed dirty; want 1", synced.Load())
		}
		if try == 10 {
			t.Skip("writeback cleaned the pages before every look")
		}
	}
	if eng.fromMemory() != 0 {
		t.Fatalf("%d files from memory; want the file streamed", eng.fromMemory())
	}
	if err := unix.Fdatasync(fd); err != nil {
		t.Fatal(err)
	}
	synced.Store(0)
	hashAll(t, h, paths, sums)
	if synced.Load() != 0 {
		t.Errorf("an old, clean file streamed: %d syncs, want 0", synced.Load())
	}
}

func mustOpen(t *testing.T, path string) int {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}
