package store

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// schema1Index copies the schema-1 fixture into a temp dir and returns its
// path and the listing of its content.
func schema1Index(t *testing.T) (string, listing) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "index.db")
	if err := os.WriteFile(path, gunzip(t, "testdata/schema1.db.gz"), 0o600); err != nil {
		t.Fatal(err)
	}
	var want listing
	if err := json.Unmarshal(fixtureListing(t, "testdata/schema1.json.gz"), &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Records) < 1000 {
		t.Fatalf("fixture listing has %d records", len(want.Records))
	}
	return path, want
}

// fixtureListing reads a fixture's listing, written when Stats and Group
// called their Duplicate bytes Wasted.
func fixtureListing(t *testing.T, name string) []byte {
	return bytes.ReplaceAll(gunzip(t, name), []byte(`"Wasted":`), []byte(`"Duplicate":`))
}

func gunzip(t *testing.T, name string) []byte {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fileSum(t testing.TB, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	// Through one buffer of the test's: under the race detector, a new
	// buffer the size of the file costs a page fault per page.
	sumBuf.Lock()
	defer sumBuf.Unlock()
	if _, err := io.CopyBuffer(h, f, sumBuf.b[:]); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

var sumBuf struct {
	sync.Mutex
	b [1 << 20]byte
}

// sameListing compares two listings through their JSON form.
func sameListing(t *testing.T, got, want listing) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if bytes.Equal(g, w) {
		return
	}
	switch {
	case got.Stats != want.Stats:
		t.Errorf("stats %+v, want %+v", got.Stats, want.Stats)
	case len(got.Records) != len(want.Records):
		t.Errorf("%d records, want %d", len(got.Records), len(want.Records))
	case len(got.Inodes) != len(want.Inodes), len(got.Digests) != len(want.Digests), len(got.Dups) != len(want.Dups):
		t.Errorf("inodes/digests/dups %d/%d/%d, want %d/%d/%d", len(got.Inodes), len(got.Digests), len(got.Dups),
			len(want.Inodes), len(want.Digests), len(want.Dups))
	}
	t.Fatal("content differs from the fixture's listing")
}

// Opening the schema-1 fixture read-only refuses and leaves it alone;
// a writable open migrates it to schema 2, then 3, with every path, record, index
// entry, group, counter, meta value and generation as before; a second
// open does nothing more.
func TestMigrateSchema1(t *testing.T) {
	migrateTxSize = 4096 // many chunks
	t.Cleanup(func() { migrateTxSize = compactTxSize })
	path, want := schema1Index(t)
	sum := fileSum(t, path)
	_, err := Open(path, Options{ReadOnly: true})
	if !errors.Is(err, ErrNeedsMigration) || !strings.Contains(err.Error(), "start annexd once to migrate it") {
		t.Fatalf("read-only open of schema 1 = %v", err)
	}
	leftover := filepath.Join(filepath.Dir(path), ".index.db.migrate-123")
	if err := os.WriteFile(leftover, []byte("a crashed migration's copy"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fileSum(t, path) != sum {
		t.Fatal("read-only open changed the file")
	}
	var log bytes.Buffer
	s := openTestAt(t, path, Options{NoSync: true, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	t.Log(strings.TrimSpace(log.String()))
	if !strings.Contains(log.String(), "store: migrated index") || !strings.Contains(log.String(), "records=1890") {
		t.Errorf("migration log: %q", log.String())
	}
	if st, _ := s.Stats(); st.SchemaVer != SchemaVersion {
		t.Fatalf("schema after migration: %d", st.SchemaVer)
	}
	sameListing(t, listIndex(t, s), want)
	mustCheck(t, s)
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("left next to the index: %v", entries)
	}
	checkKeysInOrder(t, s)
	// Still writable, and Get finds a multi-byte-id directory's file.
	if r, ok, err := s.Get([]byte("/fx/d16384/f1.dat")); err != nil || !ok || r.Ino != 1<<32+16384 {
		t.Fatalf("Get after migration: %+v %v %v", r, ok, err)
	}
	mustPut(t, s, "/fx/d16384/new", rec("new", 3, 2049, 1<<33))
}

// A second open of a migrated index opens the same file and logs nothing.
func TestMigrateOnce(t *testing.T) {
	path, want := schema1Index(t)
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	before, _ := os.Stat(path)
	var log bytes.Buffer
	s = openTestAt(t, path, Options{NoSync: true, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	after, _ := os.Stat(path)
	if !os.SameFile(before, after) || log.Len() != 0 {
		t.Fatalf("second open replaced the file (%v) or logged %q", !os.SameFile(before, after), log.String())
	}
	sameListing(t, listIndex(t, s), want)
}

// A migration stopped at any step leaves the schema-1 file as it was,
// openable, and no copy next to it; the next open migrates it.
func TestMigrateInterrupted(t *testing.T) {
	migrateTxSize = 4096
	t.Cleanup(func() { migrateTxSize = compactTxSize; migrateHook = func(string) error { return nil } })
	path, want := schema1Index(t)
	sum := fileSum(t, path)
	boom := errors.New("injected failure")
	for _, at := range []struct {
		step string
		nth  int
	}{{"chunk", 1}, {"chunk", 40}, {"rename", 1}} {
		n := 0
		migrateHook = func(step string) error {
			if step == at.step {
				if n++; n == at.nth {
					return boom
				}
			}
			return nil
		}
		if _, err := Open(path, Options{NoSync: true}); !errors.Is(err, boom) {
			t.Fatalf("open failing at %s %d = %v", at.step, at.nth, err)
		}
		if n < at.nth {
			t.Fatalf("only %d %s steps", n, at.step)
		}
		if fileSum(t, path) != sum {
			t.Fatalf("failure at %s %d changed the index", at.step, at.nth)
		}
		if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
			t.Errorf("left next to the index: %v", entries)
		}
		if _, err := Open(path, Options{ReadOnly: true}); !errors.Is(err, ErrNeedsMigration) {
			t.Fatalf("after failure at %s: read-only open = %v", at.step, err)
		}
	}
	migrateHook = func(string) error { return nil }
	s := openTestAt(t, path, Options{NoSync: true})
	sameListing(t, listIndex(t, s), want)
}

// A damaged schema-1 index is not migrated, and not touched; the error
// says what to do, since check-db cannot open it before its migration.
func TestMigrateRefusesDamage(t *testing.T) {
	path, _ := schema1Index(t)
	// An inode entry without its record: the copy's invariants fail.
	editRaw(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket(codec.BucketInodes).Put([]byte{1, 2, 3, 'x'}, nil)
	})
	sum := fileSum(t, path)
	_, err := Open(path, Options{NoSync: true})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "left as it was") || !strings.Contains(err.Error(), "move it away") {
		t.Fatalf("open of a damaged schema-1 index = %v", err)
	}
	if fileSum(t, path) != sum {
		t.Fatal("a failed migration changed the index")
	}
}

// checkKeysInOrder checks that the files, dirnames and inodes buckets are
// in numeric order of their ids.
func checkKeysInOrder(t *testing.T, s *Store) {
	t.Helper()
	err := s.db.View(func(tx *bolt.Tx) error {
		var last uint64
		err := tx.Bucket(codec.BucketFiles).ForEach(func(k, _ []byte) error {
			id, _, ok := codec.SplitFileKey(k)
			if !ok || id < last {
				t.Errorf("files key %x after id %d", k, last)
			}
			last = id
			return nil
		})
		if err != nil {
			return err
		}
		var lastDev, lastIno uint64
		return tx.Bucket(codec.BucketInodes).ForEach(func(k, _ []byte) error {
			dev, n := codec.ReadID(k)
			ino, m := codec.ReadID(k[n:])
			if n == 0 || m == 0 || dev < lastDev || (dev == lastDev && ino < lastIno) {
				t.Errorf("inodes key %x after (%d, %d)", k, lastDev, lastIno)
			}
			lastDev, lastIno = dev, ino
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

var idBoundaries = []uint64{0, 1, 127, 128, 255, 256, 1<<16 - 1, 1 << 16, 1<<32 - 1, 1 << 32, 1<<56 - 1, 1 << 56, math.MaxUint64 - 1, math.MaxUint64}

// Encoded ids sort as the numbers do, decode to themselves and are never
// a prefix of one another.
func TestIDOrder(t *testing.T) {
	enc := make([][]byte, len(idBoundaries))
	for i, v := range idBoundaries {
		enc[i] = codec.IDKey(v)
		if got, ok := codec.ParseIDKey(enc[i]); !ok || got != v {
			t.Errorf("%d → %x → %d, %v", v, enc[i], got, ok)
		}
	}
	for i := range enc {
		for j := range enc {
			if c := bytes.Compare(enc[i], enc[j]); c != cmp.Compare(i, j) {
				t.Errorf("%d (%x) vs %d (%x): %d", idBoundaries[i], enc[i], idBoundaries[j], enc[j], c)
			}
			if i != j && bytes.HasPrefix(enc[i], enc[j]) {
				t.Errorf("%x has prefix %x", enc[i], enc[j])
			}
		}
	}
	if !slices.IsSortedFunc(enc, bytes.Compare) {
		t.Error("encoded boundaries out of order")
	}
	// File keys sort by directory id first, whatever the names.
	a, b := codec.FileKey(nil, 255, []byte("\xff\xff")), codec.FileKey(nil, 256, []byte("\x00"))
	if bytes.Compare(a, b) >= 0 {
		t.Errorf("file key of id 255 %x sorts after id 256's %x", a, b)
	}
	for _, bad := range [][]byte{nil, {9}, {2, 1}, {1, 0}, {2, 0, 5}, {0, 0}} {
		if _, ok := codec.ParseIDKey(bad); ok {
			t.Errorf("codec.ParseIDKey(%x) accepted", bad)
		}
	}
}

// FuzzReadID: whatever readID accepts is the canonical encoding of what
// it returns, and encodings of two numbers compare as the numbers.
func FuzzReadID(f *testing.F) {
	for _, v := range idBoundaries {
		f.Add(codec.IDKey(v), v, v+1)
	}
	f.Add([]byte{1, 0}, uint64(0), uint64(1<<40))
	f.Fuzz(func(t *testing.T, b []byte, x, y uint64) {
		if v, n := codec.ReadID(b); n > 0 && !bytes.Equal(codec.AppendID(nil, v), b[:n]) {
			t.Fatalf("codec.ReadID(%x) = %d, %d; encoding of %d is %x", b, v, n, v, codec.AppendID(nil, v))
		}
		ex, ey := codec.IDKey(x), codec.IDKey(y)
		if c := bytes.Compare(ex, ey); c != cmp.Compare(x, y) {
			t.Fatalf("%d vs %d: encodings %x %x compare %d", x, y, ex, ey, c)
		}
		if v, ok := codec.ParseIDKey(ex); !ok || v != x {
			t.Fatalf("%d → %x → %d", x, ex, v)
		}
	})
}

const migrateEnvIndex = "ANNEXD_STORE_MIGRATE_INDEX"

// migrateChild migrates the index at path in small chunks, printing each
// step and pausing after it, so the parent can kill it at a chosen step.
func migrateChild(path string) {
	migrateTxSize = 4096
	migrateHook = func(step string) error {
		fmt.Println(step)
		time.Sleep(2 * time.Millisecond)
		return nil
	}
	s, err := Open(path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	_ = s.Close()
	fmt.Println("migrated")
}

// A migration killed at any step (SIGKILL, fsync on) leaves the schema-1
// index untouched, the complete schema-2 copy (its verified index maybe
// partial) or the complete schema-3 index; the next writable open
// finishes the work and removes the copy left behind.
func TestMigrateKilled(t *testing.T) {
	path, want := schema1Index(t)
	v1 := gunzip(t, "testdata/schema1.db.gz")
	sum := sha256.Sum256(v1)
	var kept, copied, done int
	for _, at := range []int{1, 2, 10, 40, 80, 1 << 20} {
		killAtStep(t, path, at)
		s, err := Open(path, Options{ReadOnly: true})
		switch {
		case errors.Is(err, ErrNeedsMigration) && schemaOf(t, path) == 2:
			copied++
			s, err := Open(path, Options{NoSync: true})
			if err != nil {
				t.Fatalf("killed at step %d: finishing the migration: %v", at, err)
			}
			sameListing(t, listIndex(t, s), want)
			mustCheck(t, s)
			s.Close()
			if err := os.WriteFile(path, v1, 0o600); err != nil {
				t.Fatal(err)
			}
		case errors.Is(err, ErrNeedsMigration):
			kept++
			if fileSum(t, path) != sum {
				t.Fatalf("killed at step %d: the schema-1 index changed", at)
			}
		case err == nil:
			done++
			sameListing(t, listIndex(t, s), want)
			mustCheck(t, s)
			s.Close()
			if err := os.WriteFile(path, v1, 0o600); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("killed at step %d: read-only open = %v", at, err)
		}
	}
	t.Logf("%d kills left schema 1, %d the schema-2 copy, %d found schema 3", kept, copied, done)
	if kept == 0 {
		t.Error("no kill happened during a migration")
	}
	if done == 0 {
		t.Error("no child finished its migration")
	}
	s := openTestAt(t, path, Options{NoSync: true})
	sameListing(t, listIndex(t, s), want)
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("left next to the index: %v", entries)
	}
}

// schemaOf reads the schema version of the index at path with bbolt alone.
func schemaOf(t *testing.T, path string) (v uint64) {
	t.Helper()
	boltView(t, path, func(tx *bolt.Tx) { v, _ = binary.Uvarint(tx.Bucket(codec.BucketMeta).Get(codec.MetaSchema)) })
	return v
}

// killAtStep runs migrateChild and SIGKILLs it once it reported step n
// (or lets it finish when it has fewer).
func killAtStep(t *testing.T, path string, n int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), migrateEnvIndex+"="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for i := 0; sc.Scan(); i++ {
		if i+1 == n {
			_ = cmd.Process.Kill()
			break
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	_ = cmd.Wait()
}

// An index reached through a symlink is migrated in place: the copy is
// made beside the file the link points to and renamed over it, so the
// link stays and the index keeps its permissions.
func TestMigrateThroughSymlink(t *testing.T) {
	real, want := schema1Index(t)
	if err := os.Chmod(real, 0o640); err != nil {
		t.Fatal(err)
	}
	// Run as root (as CI does), the migration keeps another user's index
	// theirs.
	if err := os.Chown(real, 4242, 4343); err != nil && os.Geteuid() == 0 {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "index.db")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	s, err := Open(link, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, err := os.Lstat(link); err != nil || fi.Mode().Type() != os.ModeSymlink {
		t.Fatalf("the link was replaced: %v %v", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(link)); len(entries) != 1 {
		t.Errorf("left next to the link: %v", entries)
	}
	if fi, err := os.Stat(real); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("migrated index mode %v (%v), want 0640", fi.Mode(), err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(real, &st); err != nil || (os.Geteuid() == 0 && (st.Uid != 4242 || st.Gid != 4343)) {
		t.Fatalf("migrated index owned by %d:%d (%v), want 4242:4343", st.Uid, st.Gid, err)
	}
	s = openTestAt(t, real, Options{NoSync: true})
	sameListing(t, listIndex(t, s), want)
}

// A migration that fills the disk says so with ErrNoSpace, naming the
// index and the free space it needs, and leaves the index as it was.
func TestMigrateDiskFull(t *testing.T) {
	dir := mountTmpfs(t, "size=800k")
	path := filepath.Join(dir, "index.db")
	v1 := gunzip(t, "testdata/schema1.db.gz")
	if err := os.WriteFile(path, v1, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, Options{NoSync: true})
	t.Log(err)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "needs about 1 MiB free in "+dir) || !strings.Contains(err.Error(), "left as it was") {
		t.Fatalf("migration on a full disk = %v", err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, v1) {
		t.Fatal("a migration that ran out of space changed the index")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left next to the index: %v", entries)
	}
}

// Two opens at once: one migrates while holding the schema-1 file's lock;
// the other, waiting for that lock, ends up with the migrated file, not
// the replaced one, and migrates nothing.
func TestMigrateConcurrentOpen(t *testing.T) {
	migrateTxSize = 4096
	t.Cleanup(func() { migrateTxSize = compactTxSize; migrateHook = func(string) error { return nil } })
	path, want := schema1Index(t)
	started := make(chan struct{})
	var once sync.Once
	migrateHook = func(string) error {
		once.Do(func() { close(started) })
		time.Sleep(time.Millisecond) // let the other open queue on the lock
		return nil
	}
	var log safeBuffer
	opts := Options{NoSync: true, LockTimeout: time.Minute, Logger: slog.New(slog.NewTextHandler(&log, nil))}
	errs := make(chan error, 2)
	open := func() {
		s, err := Open(path, opts)
		if err == nil {
			if st, serr := s.Stats(); serr != nil || st.SchemaVer != SchemaVersion {
				err = fmt.Errorf("opened schema %d (%v)", st.SchemaVer, serr)
			}
			s.Close()
		}
		errs <- err
	}
	go open()
	<-started
	go open()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(log.String(), "store: migrated index"); n != 1 {
		t.Fatalf("%d migrations logged: %s", n, log.String())
	}
	s := openTestAt(t, path, Options{NoSync: true})
	sameListing(t, listIndex(t, s), want)
}

// safeBuffer is a bytes.Buffer for several goroutines.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *safeBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *safeBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
