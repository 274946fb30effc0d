package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// makeIndex writes an index with n records and returns its path.
func makeIndex(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	for i := range n {
		mustPutQuiet(s, p("/data/d%d/file-%d.txt", i%17, i), rec(fmt.Sprint(i%300), int64(i%300), 1, uint64(i)))
	}
	flushed(t, s)
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// openMustFail opens path, expects an error wrapping want and naming the
// file, and checks that the file was not changed.
func openMustFail(t *testing.T, path string, want error) {
	t.Helper()
	before, _ := os.ReadFile(path)
	for _, ro := range []bool{false, true} {
		_, err := Open(path, Options{ReadOnly: ro})
		if !errors.Is(err, want) || !strings.Contains(err.Error(), path) {
			t.Errorf("Open(readOnly=%v) = %v, want %v naming %s", ro, err, want, path)
		}
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Errorf("Open changed %s", path)
	}
}

// boltView runs fn in a read transaction of the index at path, opened
// read-only with bbolt alone.
func boltView(t *testing.T, path string, fn func(tx *bolt.Tx)) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error { fn(tx); return nil }); err != nil {
		t.Fatal(err)
	}
}

// highWater is how much of the index file at path its pages fill; the
// file beyond that is room bbolt set aside for growth.
func highWater(t *testing.T, path string) (n int64) {
	t.Helper()
	boltView(t, path, func(tx *bolt.Tx) { n = tx.Size() })
	return n
}

func TestOpenTruncatedIndex(t *testing.T) {
	path := makeIndex(t, 3000)
	for _, size := range []int64{highWater(t, path) / 2, 8192, 100, 30} {
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		openMustFail(t, path, ErrCorrupt)
	}
}

func TestOpenForeignFiles(t *testing.T) {
	dir := t.TempDir()
	random := filepath.Join(dir, "random")
	b := make([]byte, 64<<10)
	_, _ = rand.Read(b)
	if err := os.WriteFile(random, b, 0o600); err != nil {
		t.Fatal(err)
	}
	openMustFail(t, random, ErrNotIndex)

	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	openMustFail(t, empty, ErrNotIndex)

	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte("my notes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	openMustFail(t, text, ErrNotIndex)

	other := filepath.Join(dir, "other.db")
	db, err := bolt.Open(other, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("stuff")); return err })
	db.Close()
	openMustFail(t, other, ErrNotIndex)

	if _, err := Open(dir, Options{}); !errors.Is(err, ErrNotIndex) {
		t.Errorf("Open of a directory = %v", err)
	}
}

func TestOpenNewerSchema(t *testing.T) {
	path := makeIndex(t, 1)
	editRaw(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket(codec.BucketMeta).Put(codec.MetaSchema, []byte{SchemaVersion + 1})
	})
	openMustFail(t, path, ErrNewerSchema)
}

func TestCheckFindsDamage(t *testing.T) {
	path := makeIndex(t, 500)
	editRaw(t, path, func(tx *bolt.Tx) error {
		for _, b := range [][]byte{codec.BucketDigest, codec.BucketInodes} {
			k, _ := tx.Bucket(b).Cursor().First()
			if err := tx.Bucket(b).Delete(k); err != nil {
				return err
			}
		}
		// A lost sequence would hand out existing directory ids again.
		if err := tx.Bucket(codec.BucketDirs).SetSequence(1); err != nil {
			return err
		}
		k, _ := tx.Bucket(codec.BucketFiles).Cursor().Last()
		return tx.Bucket(codec.BucketFiles).Put(k, []byte{1, 1, 0, 3})
	})
	s, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rep, err := s.Check()
	if err != nil {
		t.Fatal(err)
	}
	// Reads that meet the damaged record name the index and the fix.
	err = s.Subtree(context.Background(), []byte("/"), func([]byte, Record) error { return nil })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "check-db") {
		t.Errorf("Subtree over a damaged record = %v, want ErrCorrupt naming %s and check-db", err, path)
	}
	text := strings.Join(rep.Problems, "\n")
	for _, want := range []string{"inode index lacks", "digest index lacks", "record digest truncated", "counters", "outside the sequence"} {
		if !strings.Contains(text, want) {
			t.Errorf("Check missed %q; found:\n%s", want, text)
		}
	}
}

// mountTmpfs mounts a tmpfs of the given options on a temp dir, unmounted at
// cleanup. Mounting needs root (CI runs as root).
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts a tmpfs and must run as root (CI does); run it with sudo")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func TestOpenReadOnlyDirectory(t *testing.T) {
	dir := mountTmpfs(t, "size=4m")
	path := filepath.Join(dir, "index.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	mustPut(t, s, "/a", rec("a", 1, 1, 1))
	stop()
	s.Close()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT|syscall.MS_RDONLY, "size=4m"); err != nil {
		t.Fatal(err)
	}
	// A new index cannot be created there …
	_, err = Open(filepath.Join(dir, "new", "index.db"), Options{})
	if err == nil || !errors.Is(err, syscall.EROFS) || !strings.Contains(err.Error(), "not writable") {
		t.Errorf("create in a read-only dir = %v", err)
	}
	// … the existing one cannot be opened for writing …
	_, err = Open(path, Options{})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not writable") {
		t.Errorf("open for writing in a read-only dir = %v", err)
	}
	// … but it can be read.
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	defer ro.Close()
	if _, ok, _ := ro.Get([]byte("/a")); !ok {
		t.Error("record missing in read-only open")
	}
}

// damagePage overwrites one page of the file with garbage.
func damagePage(t *testing.T, path string, page int64) {
	t.Helper()
	var ps int
	boltView(t, path, func(tx *bolt.Tx) { ps = tx.DB().Info().PageSize })
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := make([]byte, ps)
	for i := range junk {
		junk[i] = byte(i*7 + 13)
	}
	if _, err := f.WriteAt(junk, page*int64(len(junk))); err != nil {
		t.Fatal(err)
	}
}

// filesRootPage returns the page id of the files bucket's root.
func filesRootPage(t *testing.T, path string) (id int64) {
	boltView(t, path, func(tx *bolt.Tx) { id = int64(tx.Bucket(codec.BucketFiles).Root()) })
	return id
}

// Damaged pages are reported by Check and turn reads into ErrCorrupt,
// never into a crash.
func TestDamagedPages(t *testing.T) {
	reported, lastReported := 0, false
	pages := []int64{7, 10, 20, 30, -1}
	for _, page := range pages {
		lastReported = false
		path := makeIndex(t, 3000)
		if page < 0 {
			page = filesRootPage(t, path) // certainly in use
		}
		damagePage(t, path, page)
		s, err := Open(path, Options{ReadOnly: true})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("page %d: Open = %v", page, err)
			}
			reported++
			lastReported = true
			continue
		}
		rep, err := s.Check()
		if err != nil {
			t.Errorf("page %d: Check: %v", page, err)
		}
		if !rep.OK() {
			reported++
			lastReported = true
		}
		if err := s.Subtree(context.Background(), []byte("/"), func([]byte, Record) error { return nil }); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Errorf("page %d: Subtree = %v, want nil or ErrCorrupt", page, err)
		}
		s.Close()
	}
	// Some of the fixed pages may be free pages; the files root is not.
	if reported < 1 || !lastReported {
		t.Fatalf("%d of %d damaged indexes reported; files root page reported: %v", reported, len(pages), lastReported)
	}
}
