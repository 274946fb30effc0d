package audit

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/directio"
	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// writeRandom writes n random bytes to path and returns them.
func writeRandom(t testing.TB, path string, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, _ = rand.Read(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// evict writes the file's pages back and drops them from the cache.
func evict(t testing.TB, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// cached returns which pages of the file are in the page cache.
func cached(t testing.TB, path string) []bool {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size == 0 {
		return nil
	}
	vec := make([]byte, (st.Size+pageSize-1)/pageSize)
	if err := mincore(fd, 0, st.Size, vec); err != nil {
		t.Fatal(err)
	}
	out := make([]bool, len(vec))
	for i, v := range vec {
		out[i] = v&1 != 0
	}
	return out
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// readPrefix reads the first n bytes of path, caching them, without
// read-ahead (which would cache more, later).
func readPrefix(t testing.TB, path string, n int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(f, make([]byte, n)); err != nil {
		t.Fatal(err)
	}
}

func lstat(t testing.TB, path string) fsstat.FileInfo {
	t.Helper()
	fi, err := fsstat.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// The reader's digest is the content's, for sizes around a page, a read
// and a partSize, read directly from the device.
func TestReaderDigest(t *testing.T) {
	dir := t.TempDir()
	r := newReader(nil, readSize)
	for _, n := range []int{0, 1, 4095, 4096, 4097, readSize + 3, partSize + 5} {
		p := filepath.Join(dir, "f")
		b := writeRandom(t, p, n)
		got := r.read(t.Context(), p, lstat(t, p), sha256.New(), false)
		if want := sha256.Sum256(b); got.Err != nil || string(got.Digest) != string(want[:]) || got.Source != FromDevice {
			t.Fatalf("%d bytes: %x, %v, %v; want %x from the device", n, got.Digest, got.Err, got.Source, want)
		}
		if !got.After.Same(lstat(t, p)) {
			t.Fatalf("%d bytes: After is not the file's lstat", n)
		}
		again := r.read(t.Context(), p, lstat(t, p), sha256.New(), true)
		if string(again.Digest) != string(got.Digest) || again.Err != nil {
			t.Fatalf("%d bytes: second read %x, %v", n, again.Digest, again.Err)
		}
	}
}

// A read comes from the device, whatever the page cache holds, and leaves
// the page cache as it found it: a file that was cached stays cached, one
// that was not is not cached afterwards, one cached in part keeps that
// part. A byte changed under the cached pages is read as it is on disk.
func TestReaderReadsTheDevice(t *testing.T) {
	for _, kind := range []loopfs.Kind{loopfs.Ext4, loopfs.XFS} {
		t.Run(string(kind), func(t *testing.T) {
			fs := loopfs.New(t, kind, loopfs.Options{Size: max(loopfs.MinSize[kind], 64<<20)})
			// The kernel may reclaim cached pages on its own (DAMON's
			// pageout, memory pressure) while the files are read, which
			// looks like pages the reader dropped: a round that lost
			// pages and did nothing else wrong is tried again, up to
			// three times. The reader's own drop loses them every time.
			var lost []string
			for round := range 3 {
				if lost = readsTheDevice(t, fs, round); len(lost) == 0 {
					return
				}
				t.Logf("round %d: %s", round, strings.Join(lost, "; "))
			}
			t.Errorf("in each of 3 rounds the read left fewer pages cached: %s", strings.Join(lost, "; "))
		})
	}
}

// readsTheDevice is one round of TestReaderReadsTheDevice on fs: it fails
// t on a wrong source or digest, or pages the read brought into the cache,
// and returns the files that lost cached pages.
func readsTheDevice(t *testing.T, fs *loopfs.FS, round int) (lost []string) {
	const size = 3<<20 + 123
	hot, cold, half := fs.Path(fmt.Sprint("hot", round)), fs.Path(fmt.Sprint("cold", round)), fs.Path(fmt.Sprint("half", round))
	for _, p := range []string{hot, cold, half} {
		writeRandom(t, p, size)
		evict(t, p)
	}
	readPrefix(t, hot, size)
	readPrefix(t, half, size/2)
	before := map[string][]bool{}
	for _, p := range []string{hot, cold, half} {
		before[p] = cached(t, p)
	}
	fs.FlipByteUnderCache(t, hot, 1000)
	disk := sha256.Sum256(readDirect(t, hot))
	r := newReader(nil, readSize)
	for _, p := range []string{hot, cold, half} {
		got := r.read(t.Context(), p, lstat(t, p), sha256.New(), false)
		if got.Err != nil || got.Source != FromDevice {
			t.Fatalf("%s: %v, %v", filepath.Base(p), got.Err, got.Source)
		}
		if p == hot && string(got.Digest) != string(disk[:]) {
			t.Fatalf("hot: the digest is not that of the bytes on disk: the page cache answered")
		}
		after := cached(t, p)
		for i := range after {
			if after[i] && !before[p][i] {
				t.Fatalf("%s: page %d cached by the read (%d pages before, %d after)", filepath.Base(p), i, countTrue(before[p]), countTrue(after))
			}
		}
		if !slices.Equal(after, before[p]) {
			var gone []int
			for i := range after {
				if before[p][i] && !after[i] {
					gone = append(gone, i)
				}
			}
			lost = append(lost, fmt.Sprintf("%s: %d pages cached before, %d after (gone: %v)", filepath.Base(p), countTrue(before[p]), countTrue(after), gone))
		}
	}
	return lost
}

// A file that btrfs keeps compressed is read through the page cache even
// with O_DIRECT. While the page cache holds none of it, the bytes come
// from the device, and the pages the read brought in are dropped again.
// Cached in part, it counts as verified from the page cache only, and the
// pages cached before stay while those the read brought in go. A second
// read drops the file's pages first and comes from the device.
func TestReaderThroughCache(t *testing.T) {
	fs := loopfs.New(t, loopfs.Btrfs, loopfs.Options{Size: 128 << 20, MountOptions: "compress-force=zstd"})
	p := fs.Path("text")
	text := bytes.Repeat([]byte("a line of text that compresses well\n"), 100000)
	if err := os.WriteFile(p, text, 0o644); err != nil {
		t.Fatal(err)
	}
	evict(t, p)
	want := sha256.Sum256(text)
	r := newReader(nil, readSize)
	got := r.read(t.Context(), p, lstat(t, p), sha256.New(), false)
	if got.Err != nil || string(got.Digest) != string(want[:]) || got.Source != FromDevice {
		t.Fatalf("cold: %x %v %v", got.Digest, got.Err, got.Source)
	}
	if n := countTrue(cached(t, p)); n != 0 {
		t.Fatalf("cold: %d pages left cached", n)
	}
	readPrefix(t, p, len(text)/2)
	before := cached(t, p)
	var dropped int64
	testHookDrop = func(_, n int64) { dropped += n }
	t.Cleanup(func() { testHookDrop = nil })
	got = r.read(t.Context(), p, lstat(t, p), sha256.New(), false)
	if got.Err != nil || string(got.Digest) != string(want[:]) || got.Source != Cached {
		t.Fatalf("half cached: %x %v %v", got.Digest, got.Err, got.Source)
	}
	if after := cached(t, p); !slices.Equal(after, before) || dropped != int64(len(before)-countTrue(before)) {
		t.Errorf("half cached: %d pages cached before, %d after; %d dropped", countTrue(before), countTrue(after), dropped)
	}
	got = r.read(t.Context(), p, lstat(t, p), sha256.New(), true)
	if got.Err != nil || string(got.Digest) != string(want[:]) || got.Source != FromDevice {
		t.Fatalf("second read: %x %v %v", got.Digest, got.Err, got.Source)
	}
}

// A file that grows or shrinks while it is read directly is reported
// changed, never hashed: a shorter one by the short read, a longer one by
// the lstat after.
func TestReaderChangedWhileRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	for _, grow := range []bool{true, false} {
		writeRandom(t, p, 3*readSize+100)
		fi := lstat(t, p)
		testHookDirect = func(path string, off int64) {
			if off == 0 {
				growOrCut(t, path, grow)
			}
		}
		got := newReader(nil, readSize).read(t.Context(), p, fi, sha256.New(), false)
		testHookDirect = nil
		wantModified(t, got, fi, grow)
	}
}

// A file on a tmpfs has no device: it is read from memory and said so.
func TestReaderNoDevice(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "audit")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := filepath.Join(dir, "f")
	b := writeRandom(t, p, 10000)
	got := newReader(nil, readSize).read(t.Context(), p, lstat(t, p), sha256.New(), false)
	if want := sha256.Sum256(b); got.Err != nil || string(got.Digest) != string(want[:]) || got.Source != NoDevice {
		t.Fatalf("%x %v %v", got.Digest, got.Err, got.Source)
	}
}

// readDirect returns the bytes of the file at path read with O_DIRECT.
func readDirect(t testing.TB, path string) []byte {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	fi := lstat(t, path)
	buf := directio.Buffer(int(fi.Size))
	n, err := unix.Pread(fd, buf, 0)
	if err != nil || int64(n) != fi.Size {
		t.Fatalf("direct read: %d, %v", n, err)
	}
	return buf[:n]
}

// A file that is not the one lstat'ed, shorter than its size or a symlink
// now is reported changed, never hashed.
func TestReaderChanged(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	writeRandom(t, p, 10000)
	fi := lstat(t, p)
	r := newReader(nil, readSize)
	stale := fi
	stale.MtimeNs--
	if got := r.read(t.Context(), p, stale, sha256.New(), false); !errors.Is(got.Err, hasher.ErrChanged) {
		t.Fatalf("other mtime: %v", got.Err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", p); err != nil {
		t.Fatal(err)
	}
	if got := r.read(t.Context(), p, fi, sha256.New(), false); !errors.Is(got.Err, hasher.ErrChanged) {
		t.Fatalf("symlink: %v", got.Err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if got := r.read(t.Context(), p, fi, sha256.New(), false); !gone(got.Err) {
		t.Fatalf("removed: %v", got.Err)
	}
}

// growOrCut appends 10 bytes to path, or cuts it to one read and 10 bytes:
// a file changed while the audit reads it.
func growOrCut(t *testing.T, path string, grow bool) {
	var err error
	if grow {
		var f *os.File
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0); err == nil {
			_, err = f.Write(make([]byte, 10))
			f.Close()
		}
	} else {
		err = os.Truncate(path, readSize+10)
	}
	if err != nil {
		t.Error(err)
	}
}

// wantModified checks a read of a file grown or cut while read (growOrCut):
// a grown one reads to its old size and its lstat after differs, a cut one
// fails as changed, and either is classified modified, never rot.
func wantModified(t *testing.T, got Read, fi fsstat.FileInfo, grow bool) {
	t.Helper()
	rec := store.Record{Backend: key.SHA256E, Digest: digestOf("old"), Size: fi.Size, MtimeNs: fi.MtimeNs, CtimeNs: fi.CtimeNs,
		Dev: fi.Dev, Ino: fi.Ino, HashedAt: fi.MtimeNs + int64(time.Minute), State: store.StateOK}
	v := Classify(&Facts{Record: rec, Before: fi, First: &got})
	switch {
	case grow && (got.Err != nil || got.After.Same(fi) || v.Class != Modified):
		t.Errorf("grown while read: %v, after %+v, verdict %v", got.Err, got.After, v)
	case !grow && (!errors.Is(got.Err, hasher.ErrChanged) || v.Class != Modified):
		t.Errorf("shrunk while read: %v, verdict %v", got.Err, v)
	}
}
