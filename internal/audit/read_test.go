package audit

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
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
// and a partSize.
func TestReaderDigest(t *testing.T) {
	dir := t.TempDir()
	r := newReader(nil, true)
	for _, n := range []int{0, 1, 4095, 4096, 4097, readSize + 3, partSize + 5} {
		p := filepath.Join(dir, "f")
		b := writeRandom(t, p, n)
		got := r.read(t.Context(), p, lstat(t, p), sha256.New(), false)
		if want := sha256.Sum256(b); got.Err != nil || string(got.Digest) != string(want[:]) {
			t.Fatalf("%d bytes: %x, %v; want %x", n, got.Digest, got.Err, want)
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

// A read leaves the page cache as it found it: a file that was cached
// stays cached, one that was not is not cached afterwards, and one cached
// in part keeps exactly that part. A second read, which drops the file's
// pages to read from the disk, restores the pages cached before the first.
func TestReaderKeepsPageCache(t *testing.T) {
	dir := t.TempDir()
	const size = 3 << 20
	hot, cold, half := filepath.Join(dir, "hot"), filepath.Join(dir, "cold"), filepath.Join(dir, "half")
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
	if countTrue(before[hot]) != len(before[hot]) || countTrue(before[cold]) != 0 || countTrue(before[half]) == 0 {
		t.Fatalf("setup: cached pages hot %d, cold %d, half %d of %d", countTrue(before[hot]), countTrue(before[cold]),
			countTrue(before[half]), len(before[hot]))
	}
	var dropped, seen []bool
	testHookDrop = func(first, n int64) {
		for i := first; i < first+n; i++ {
			dropped[i] = true
		}
	}
	testHookResident = func(first int64, vec []byte) {
		for i, v := range vec {
			seen[first+int64(i)] = v&1 != 0
		}
	}
	t.Cleanup(func() { testHookDrop, testHookResident = nil, nil })
	r := newReader(nil, true)
	for _, again := range []bool{false, true} {
		for _, p := range []string{hot, cold, half} {
			dropped, seen = make([]bool, len(before[p])), make([]bool, len(before[p]))
			if got := r.read(t.Context(), p, lstat(t, p), sha256.New(), false); got.Err != nil {
				t.Fatal(got.Err)
			}
			if again {
				if got := r.read(t.Context(), p, lstat(t, p), sha256.New(), true); got.Err != nil {
					t.Fatal(got.Err)
				}
			}
			// What the reader chose: drop exactly the pages that mincore,
			// when the reader looked, said it would bring in. (That is what
			// the test saw, less what memory pressure took meanwhile.)
			for i := range dropped {
				if dropped[i] == seen[i] {
					t.Fatalf("%s (second read %v): page %d dropped %v, cached when the reader looked %v, before %v",
						filepath.Base(p), again, i, dropped[i], seen[i], before[p][i])
				}
			}
			// What the kernel shows. A page the reader brought in is not
			// cached now; a page cached before should still be, unless
			// memory pressure evicted it, which only the log notes.
			after := cached(t, p)
			lost := 0
			for i := range after {
				switch {
				case after[i] && !seen[i]:
					t.Fatalf("%s (second read %v): page %d left cached by the audit", filepath.Base(p), again, i)
				case !after[i] && before[p][i]:
					lost++
				}
			}
			if lost > 0 {
				t.Logf("%s: %d pages cached before are gone (evicted by memory pressure, not dropped by the reader)", filepath.Base(p), lost)
			}
		}
	}
	if r.cached == 0 || r.fresh == 0 {
		t.Errorf("cached %d, fresh %d bytes: both kinds were read", r.cached, r.fresh)
	}
	// Without keep, what it read stays cached.
	plain := newReader(nil, false)
	if got := plain.read(t.Context(), cold, lstat(t, cold), sha256.New(), false); got.Err != nil {
		t.Fatal(got.Err)
	}
	if n := countTrue(cached(t, cold)); n == 0 {
		t.Fatal("a reader that keeps nothing dropped pages")
	}
}

// A file that is not the one lstat'ed, shorter than its size or a symlink
// now is reported changed, never hashed.
func TestReaderChanged(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	writeRandom(t, p, 10000)
	fi := lstat(t, p)
	r := newReader(nil, true)
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
