package indexer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
)

const settleTimeout = 30 * time.Second

func TestInitialScanIndexesTree(t *testing.T) {
	root := t.TempDir()
	for i := range 50 {
		writeFile(t, filepath.Join(root, fmt.Sprintf("d%d/sub/f%d.txt", i%5, i)), strings.Repeat("x", i))
	}
	writeFile(t, filepath.Join(root, ".git/objects/ab"), "ignored")
	must(t, os.Symlink("d0", filepath.Join(root, "link")))
	e := newEnv(t, root, envOpts{noWatch: true, opts: Options{Ignore: []string{".git/"}}})
	deadline := time.Now().Add(settleTimeout)
	for !e.ix.Idle() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	// The .git file is ignored, so it must be absent from the index.
	if _, ok, _ := e.st.Get([]byte(filepath.Join(root, ".git/objects/ab"))); ok {
		t.Error("ignored file was indexed")
	}
	must(t, os.RemoveAll(filepath.Join(root, ".git")))
	e.settle(settleTimeout)
	if n := e.h.total(); n != 50 {
		t.Errorf("hashed %d times, want 50", n)
	}
	p := e.ix.Progress()
	if !p.InitialScanDone || p.FilesSeen != 50 || p.FilesHashed != 50 {
		t.Errorf("progress %+v", p)
	}
}

func TestChangesFollowTheTree(t *testing.T) {
	e := newEnv(t, "", envOpts{})
	r := e.root
	e.settle(settleTimeout)

	writeFile(t, filepath.Join(r, "a.txt"), "one")
	writeFile(t, filepath.Join(r, "dir/b.txt"), "two")
	writeFile(t, filepath.Join(r, "dir/sub/c.txt"), "three")
	writeFile(t, filepath.Join(r, "gone.txt"), "gone")
	writeFile(t, filepath.Join(r, "tree/x/1"), "1")
	writeFile(t, filepath.Join(r, "tree/x/2"), "2")
	e.settle(settleTimeout)

	// modify, append, truncate, delete
	writeFile(t, filepath.Join(r, "a.txt"), "ONE")
	f, err := os.OpenFile(filepath.Join(r, "dir/b.txt"), os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteString(" and more")
	must(t, err)
	must(t, f.Close())
	must(t, os.Truncate(filepath.Join(r, "dir/sub/c.txt"), 2))
	must(t, os.Remove(filepath.Join(r, "gone.txt")))
	e.settle(settleTimeout)

	// rename in place, move across directories, delete a whole tree
	must(t, os.Rename(filepath.Join(r, "a.txt"), filepath.Join(r, "a2.txt")))
	must(t, os.Rename(filepath.Join(r, "dir/b.txt"), filepath.Join(r, "tree/b.txt")))
	must(t, os.RemoveAll(filepath.Join(r, "tree/x")))
	e.settle(settleTimeout)

	// a directory moved in from outside the root, and one moved out
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "in/f1"), "f1")
	writeFile(t, filepath.Join(outside, "in/deep/f2"), "f2")
	must(t, os.Rename(filepath.Join(outside, "in"), filepath.Join(r, "in")))
	must(t, os.Rename(filepath.Join(r, "dir"), filepath.Join(outside, "dir")))
	e.settle(settleTimeout)
}

func TestRenamesKeepKeysWithoutRehash(t *testing.T) {
	// Old mtimes: records of files hashed right after they were written are
	// racily clean, and those are re-hashed rather than trusted. The files
	// exist before the watcher starts: a write the watcher learns of only
	// after the file was hashed makes a later rename hash it again.
	r := t.TempDir()
	writeOld(t, filepath.Join(r, "f.dat"), "content of f")
	for i := range 20 {
		writeOld(t, filepath.Join(r, fmt.Sprintf("d/s/%d.dat", i)), fmt.Sprint("file ", i))
	}
	e := newEnv(t, r, envOpts{})
	e.settle(settleTimeout)
	before := e.h.snapshot()

	must(t, os.Rename(filepath.Join(r, "f.dat"), filepath.Join(r, "g.dat")))
	must(t, os.Rename(filepath.Join(r, "d"), filepath.Join(r, "e")))
	e.settle(settleTimeout)
	if hashed := e.h.hashedSince(before); len(hashed) != 0 {
		t.Errorf("renames caused hashes of %v, want none", hashed)
	}
	if n := e.ix.Progress().Renames; n == 0 {
		t.Error("no rename was recognised")
	}
}

func TestMkdirPAndFilesAtOnce(t *testing.T) {
	e := newEnv(t, "", envOpts{})
	e.settle(settleTimeout)
	deep := filepath.Join(e.root, "a/b/c")
	must(t, os.MkdirAll(deep, 0o755))
	for i := range 10 {
		must(t, os.WriteFile(filepath.Join(deep, fmt.Sprint(i)), []byte(fmt.Sprint("n", i)), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(e.root, "a/top"), []byte("top"), 0o644))
	e.settle(settleTimeout)
}

func TestBurstEveryFileOnce(t *testing.T) {
	const n = 10000
	// A quiet delay well above any stall of the writing loop keeps the
	// burst one burst: were the new directory to settle mid-loop, its walk
	// and the later files' own writes would each hash some files.
	e := newEnv(t, "", envOpts{quiet: 2 * time.Second})
	e.settle(settleTimeout)
	for i := range n {
		p := filepath.Join(e.root, fmt.Sprintf("burst/%02d/%d", i%100, i))
		if i < 100 {
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		}
		must(t, os.WriteFile(p, []byte(fmt.Sprint("burst file ", i)), 0o644))
	}
	e.settle(90 * time.Second)
	for i := range n {
		p := filepath.Join(e.root, fmt.Sprintf("burst/%02d/%d", i%100, i))
		if c := e.h.count(p); c != 1 {
			t.Fatalf("%s hashed %d times, want 1 (watcher overflows: %d)", p, c, e.w.Status().Roots[0].Overflows)
		}
	}
}

func TestSlowWriterHashedOnceWhenDone(t *testing.T) {
	// The writes come 100 ms apart; a quiet delay ten times that keeps a
	// loaded machine's late write from ending the quiet period early.
	e := newEnv(t, "", envOpts{quiet: time.Second})
	e.settle(settleTimeout)
	p := filepath.Join(e.root, "slow.log")
	f, err := os.Create(p)
	must(t, err)
	for i := range 30 { // about 3 s
		_, err := fmt.Fprintf(f, "line %d\n", i)
		must(t, err)
		time.Sleep(100 * time.Millisecond)
	}
	must(t, f.Close())
	e.settle(settleTimeout)
	if c := e.h.count(p); c != 1 {
		t.Errorf("slowly written file hashed %d times, want 1", c)
	}
}

func TestChangeWhileHashedIsRetried(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "growing.bin")
	// Large enough to take the large files' path: queued ahead of the
	// walk and read ahead by the hasher.
	writeLarge(t, p, earlyMin)
	// The first hash of the file meets an append as it starts: the file
	// changes after the indexer took its identity and before the hash
	// ends, every time, however loaded the machine. (Appends timed to
	// land mid-read needed a 256 MiB file hashed several times over.)
	h := &countingHasher{n: make(map[string]int)}
	var once sync.Once
	h.gate = func(path string) {
		if path != p {
			return
		}
		once.Do(func() { appendMore(t, p) })
	}
	e := newEnv(t, root, envOpts{h: h, noWatch: true})
	waitFor(t, "a retry of the file that changed while it was hashed", func() bool { return e.ix.Progress().Retries > 0 })
	e.ix.Changed(context.Background(), p) // as the watcher would
	e.settle(settleTimeout)
	rec, ok, err := e.st.Get([]byte(p))
	must(t, err)
	b, _ := os.ReadFile(p)
	sum := sha256.Sum256(b)
	if !ok || string(rec.Digest) != string(sum[:]) || rec.Size != int64(len(b)) {
		t.Fatalf("record %+v does not describe the final content", rec)
	}
}

func TestOverflowLeadsToRescan(t *testing.T) {
	e := newEnv(t, "", envOpts{})
	e.settle(settleTimeout)
	scans := e.ix.Progress().ScansCompleted
	// Stop reading the watcher's events: its channel fills, it stops
	// reading inotify, and the kernel queue (16384 events by default)
	// overflows.
	// First more settled paths than its channel holds, so that it blocks.
	dir := filepath.Join(e.root, "flood")
	sent := e.w.Emitted()
	must(t, os.MkdirAll(dir, 0o755))
	// Files made while the new directory is pending would fold into its
	// Rescan; once that is sent, each file is an event of its own.
	waitFor(t, "the new directory settles", func() bool { return e.w.Emitted() > sent })
	e.pause <- true
	const files = 600
	for i := range files {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), nil, 0o644))
	}
	// The channel holds 256 events; the next send blocks the watcher.
	waitFor(t, "the watcher blocks on its full channel", e.watcherBlocked)
	max := 16384
	if b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events"); err == nil {
		fmt.Sscan(string(b), &max)
	}
	for i := 0; i < max+2000; i++ {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprint(i%files)), []byte(fmt.Sprint(i)), 0o644))
	}
	e.pause <- false
	deadline := time.Now().Add(settleTimeout)
	for time.Now().Before(deadline) {
		if st := e.w.Status(); len(st.Roots) == 1 && st.Roots[0].Overflows > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := e.w.Status(); st.Roots[0].Overflows == 0 {
		t.Fatal("the watcher saw no overflow")
	}
	e.settle(settleTimeout)
	if e.ix.Progress().ScansCompleted <= scans {
		t.Error("overflow did not lead to a rescan")
	}
}

func TestLookupNeverStale(t *testing.T) {
	e := newEnv(t, "", envOpts{quiet: 5 * time.Second})
	e.settle(settleTimeout)
	p := filepath.Join(e.root, "doc.txt")
	writeFile(t, p, "version 1")
	ctx := context.Background()
	// The watcher holds the change for 5 s; Lookup must hash on demand.
	r, err := e.ix.Lookup(ctx, p, false)
	must(t, err)
	want := sha256.Sum256([]byte("version 1"))
	if r.State != Current || r.Key.Name()[:64] != fmt.Sprintf("%x", want) {
		t.Fatalf("lookup after write: %+v", r)
	}
	writeFile(t, p, "version 2, longer")
	r, err = e.ix.Lookup(ctx, p, true)
	must(t, err)
	want = sha256.Sum256([]byte("version 2, longer"))
	if r.State != Current || r.Key.Name()[:64] != fmt.Sprintf("%x", want) {
		t.Fatalf("lookup after rewrite: %+v", r)
	}
	must(t, os.Remove(p))
	if r, _ := e.ix.Lookup(ctx, p, false); r.State != Missing {
		t.Fatalf("lookup of removed file: %+v", r)
	}
	if _, err := e.ix.Lookup(ctx, "/elsewhere", false); err == nil {
		t.Fatal("lookup outside the roots succeeded")
	}
}

// An unreadable file gets a record in state unreadable. Root reads any
// file, so as root the test runs itself again as nobody.
func TestUnreadableFileRecorded(t *testing.T) {
	if os.Getuid() == 0 {
		runAsNobody(t, "TestUnreadableFileRecorded")
		return
	}
	root := t.TempDir()
	p := filepath.Join(root, "secret")
	writeOld(t, p, "s")
	must(t, os.Chmod(p, 0))
	writeOld(t, filepath.Join(root, "open"), "o")
	e := newEnv(t, root, envOpts{noWatch: true})
	deadline := time.Now().Add(settleTimeout)
	for !e.ix.Idle() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	rec, ok, err := e.st.Get([]byte(p))
	if err != nil || !ok || rec.State != store.StateUnreadable {
		t.Fatalf("record %+v ok=%v err=%v", rec, ok, err)
	}
	if r, err := e.ix.Lookup(context.Background(), p, false); err != nil || r.State != Unreadable {
		t.Errorf("lookup: %+v %v", r, err)
	}
	if rec, ok, _ := e.st.Get([]byte(filepath.Join(root, "open"))); !ok || rec.State != store.StateOK {
		t.Errorf("readable neighbour: %+v", rec)
	}
}

// runAsNobody runs test in a copy of the test binary as uid/gid 65534 and
// fails when it fails.
func runAsNobody(t *testing.T, test string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "indexer-nobody-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	self, err := os.ReadFile(os.Args[0])
	must(t, err)
	bin := filepath.Join(dir, "indexer.test")
	must(t, os.WriteFile(bin, self, 0o755))
	cmd := exec.Command(bin, "-test.run", "^"+test+"$", "-test.v")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+test) {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
}

func TestRestartDoesNotRehash(t *testing.T) {
	root := t.TempDir()
	for i := range 100 {
		writeOld(t, filepath.Join(root, fmt.Sprintf("d%d/f%d", i%7, i)), fmt.Sprint(i))
	}
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	e.stop()
	// Change one file, remove one, while "down".
	writeFile(t, filepath.Join(root, "d0/f0"), "changed while down")
	must(t, os.Remove(filepath.Join(root, "d1/f1")))
	e.h = &countingHasher{n: make(map[string]int)}
	e.start(envOpts{noWatch: true})
	e.settle(settleTimeout)
	if n := e.h.total(); n != 1 {
		t.Errorf("restart hashed %d files, want 1", n)
	}
}

// A rescan that cannot read a directory drops the records of files that
// vanished elsewhere but keeps those under the unreadable directory. Root
// reads any directory, so as root the test runs itself again as nobody.
func TestSweepKeepsUnreadableSubtrees(t *testing.T) {
	if os.Getuid() == 0 {
		runAsNobody(t, "TestSweepKeepsUnreadableSubtrees")
		return
	}
	root := t.TempDir()
	locked := filepath.Join(root, "locked")
	writeOld(t, filepath.Join(locked, "a"), "a")
	writeOld(t, filepath.Join(root, "other/b"), "b")
	writeOld(t, filepath.Join(root, "other/c"), "c")
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)

	must(t, os.Chmod(locked, 0))
	t.Cleanup(func() { os.Chmod(locked, 0o755) })
	must(t, os.Remove(filepath.Join(root, "other/b")))
	scans := e.ix.Progress().ScansCompleted
	e.ix.Rescan(root)
	deadline := time.Now().Add(settleTimeout)
	for e.ix.Progress().ScansCompleted == scans && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok, _ := e.st.Get([]byte(filepath.Join(root, "other/b"))); ok {
		t.Error("record of a vanished file kept")
	}
	if _, ok, _ := e.st.Get([]byte(filepath.Join(locked, "a"))); !ok {
		t.Error("record under an unreadable directory dropped")
	}
	if _, ok, _ := e.st.Get([]byte(filepath.Join(root, "other/c"))); !ok {
		t.Error("record of a present file dropped")
	}
}

// A root that is empty on a rescan (an unmounted disk's mount point) keeps
// its records.
func TestEmptyRootKeepsRecords(t *testing.T) {
	root := t.TempDir()
	writeOld(t, filepath.Join(root, "disk/file"), "x")
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	must(t, os.RemoveAll(filepath.Join(root, "disk")))
	e.ix.Rescan(root)
	deadline := time.Now().Add(settleTimeout)
	for p := e.ix.Progress(); !p.Idle || p.ScansPending > 0; p = e.ix.Progress() {
		if time.Now().After(deadline) {
			t.Fatal("rescan did not end")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok, _ := e.st.Get([]byte(filepath.Join(root, "disk/file"))); !ok {
		t.Error("records of an empty root were dropped")
	}
}

// A record an audit marked corrupt keeps its finding while the file's
// identity is unchanged: scans do not overwrite it with a fresh digest.
func TestCorruptRecordKept(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "bitrot.bin")
	writeOld(t, p, "original")
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	rec, ok, err := e.st.Get([]byte(p))
	must(t, err)
	if !ok {
		t.Fatal("not indexed")
	}
	rec.State = store.StateCorrupt
	must(t, e.st.Put(context.Background(), []byte(p), rec))
	hashed := e.h.total()
	e.ix.Rescan(root)
	deadline := time.Now().Add(settleTimeout)
	for p := e.ix.Progress(); !p.Idle || p.ScansPending > 0; p = e.ix.Progress() {
		if time.Now().After(deadline) {
			t.Fatal("rescan did not end")
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, _, _ := e.st.Get([]byte(p))
	if got.State != store.StateCorrupt || e.h.total() != hashed {
		t.Errorf("state %v after rescan, %d new hashes; want corrupt kept and no hash", got.State, e.h.total()-hashed)
	}
	if r, err := e.ix.Lookup(context.Background(), p, false); err != nil || r.State != Corrupt || r.Key.IsZero() {
		t.Errorf("lookup: %+v %v", r, err)
	}
}

// A tree deeper than PATH_MAX (made with relative opens) does not stop the
// scan: the rest of the root is indexed.
func TestOverlongPathDoesNotStopTheScan(t *testing.T) {
	root := t.TempDir()
	for i := range 20 {
		writeOld(t, filepath.Join(root, fmt.Sprintf("n%02d", i)), fmt.Sprint("neighbour ", i))
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	name := strings.Repeat("d", 250)
	for range 17 { // 17 × 251 bytes: longer than the index takes
		must(t, unix.Mkdirat(fd, name, 0o755))
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		must(t, err)
		unix.Close(fd)
		fd = next
	}
	ffd, err := unix.Openat(fd, "deep.txt", unix.O_CREAT|unix.O_WRONLY, 0o644)
	must(t, err)
	unix.Write(ffd, []byte("deep"))
	unix.Close(ffd)
	unix.Close(fd)
	t.Cleanup(func() { exec.Command("rm", "-rf", root).Run() })

	e := newEnv(t, root, envOpts{noWatch: true})
	deadline := time.Now().Add(settleTimeout)
	for !e.ix.Idle() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 20 {
		p := filepath.Join(root, fmt.Sprintf("n%02d", i))
		if rec, ok, err := e.st.Get([]byte(p)); err != nil || !ok || rec.State != store.StateOK {
			t.Errorf("%s: %+v %v %v", p, rec, ok, err)
		}
	}
}

// A new file that reuses the inode of a deleted one, with the same size and
// mtime, is not taken for a rename of it: its content is hashed.
func TestReusedInodeIsNotARename(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a.dat"), filepath.Join(root, "b.dat")
	writeOld(t, a, "content A")
	fiA, err := fsstat.Lstat(a)
	must(t, err)
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	e.stop()
	// While the daemon is down, a.dat goes and b.dat comes, with another
	// content of the same size and the same mtime.
	must(t, os.Remove(a))
	writeFile(t, b, "content B")
	fiB, err := fsstat.Lstat(b)
	must(t, err)
	if fiB.Ino != fiA.Ino || fiB.Dev != fiA.Dev {
		t.Skip("the file system did not hand the freed inode to the next new file")
	}
	mt := time.Unix(0, fiA.MtimeNs)
	must(t, os.Chtimes(b, mt, mt))
	e.start(envOpts{noWatch: true})
	e.settle(settleTimeout) // fails on a wrong digest for b.dat
	if n := e.h.count(b); n != 1 {
		t.Errorf("b.dat hashed %d times, want 1", n)
	}
}

// A file that takes the place of a directory drops the directory's records,
// and the other way round.
func TestFileAndDirectoryReplaceEachOther(t *testing.T) {
	e := newEnv(t, "", envOpts{})
	r := e.root
	writeOld(t, filepath.Join(r, "d/x"), "x")
	writeOld(t, filepath.Join(r, "d/y"), "y")
	e.settle(settleTimeout)
	must(t, os.RemoveAll(filepath.Join(r, "d")))
	writeOld(t, filepath.Join(r, "d"), "now a file")
	e.settle(settleTimeout)
	must(t, os.Remove(filepath.Join(r, "d")))
	writeOld(t, filepath.Join(r, "d/z"), "a directory again")
	e.settle(settleTimeout)
}

// A file that changes while Lookup hashes it is retried by the pipeline even
// after the caller's request ended, so it does not stay pending for ever.
func TestLookupRetryOutlivesRequest(t *testing.T) {
	h := &countingHasher{n: make(map[string]int)}
	e := newEnv(t, "", envOpts{h: h, noWatch: true})
	e.settle(settleTimeout)
	p := filepath.Join(e.root, "growing.bin")
	must(t, os.WriteFile(p, make([]byte, 1<<20), 0o644))
	// The lookup's hash meets an append as it starts, every time, however
	// loaded the machine; later hashes (the pipeline's retry) do not.
	var appended atomic.Bool
	h.mu.Lock()
	h.gate = func(path string) {
		if path != p || appended.Swap(true) {
			return
		}
		appendMore(t, p)
	}
	h.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	_, err := e.ix.Lookup(ctx, p, false)
	cancel() // the request ends
	must(t, err)
	if !appended.Load() || e.ix.Progress().Retries == 0 {
		t.Fatal("the lookup did not meet the file changing while it was hashed")
	}
	e.settle(settleTimeout) // the final content, once the retry ran
}

// Files moved into a directory that has files of its own, their old
// directory then removed, leave the records already there alone. The files
// exist before the watcher starts: the watcher may read a write's event
// after the initial scan hashed the file, and a rename then rightly
// hashes it again.
func TestMoveIntoIndexedDirectoryKeepsItsRecords(t *testing.T) {
	r := t.TempDir()
	writeOld(t, filepath.Join(r, "b/keep.txt"), "keep")
	writeOld(t, filepath.Join(r, "a/x.txt"), "x")
	writeOld(t, filepath.Join(r, "a/y.txt"), "y")
	e := newEnv(t, r, envOpts{})
	e.settle(settleTimeout)
	before := e.h.snapshot()
	must(t, os.Rename(filepath.Join(r, "a/x.txt"), filepath.Join(r, "b/x.txt")))
	must(t, os.Rename(filepath.Join(r, "a/y.txt"), filepath.Join(r, "b/y.txt")))
	must(t, os.Remove(filepath.Join(r, "a")))
	e.settle(settleTimeout) // fails on a missing record for b/keep.txt
	if hashed := e.h.hashedSince(before); len(hashed) != 0 {
		t.Errorf("moves caused hashes of %v, want none", hashed)
	}
}

// Unchanged holds for a record whose identity matches the file and which is
// not racily clean, and only then.
func TestUnchanged(t *testing.T) {
	e := newEnv(t, "", envOpts{noWatch: true})
	p := filepath.Join(e.root, "f.txt")
	writeOld(t, p, "content")
	e.ix.Rescan(e.root)
	e.settle(settleTimeout)
	rec, ok, err := e.st.Get([]byte(p))
	must(t, err)
	if !ok || !e.ix.Unchanged(p, &rec) {
		t.Fatalf("settled record %+v not unchanged", rec)
	}
	racy := rec
	racy.HashedAt = rec.CtimeNs // hashed in the tick of its last change
	if e.ix.Unchanged(p, &racy) {
		t.Error("racily clean record counted as unchanged")
	}
	other := rec
	other.CtimeNs++
	if e.ix.Unchanged(p, &other) {
		t.Error("record with another ctime counted as unchanged")
	}
	if e.ix.Unchanged(filepath.Join(e.root, "gone"), &rec) {
		t.Error("record of a missing file counted as unchanged")
	}
}

// A file hashed, then made unreadable (chmod 000 moves ctime alone), keeps
// the digest and hash time of its last content known good in its
// unreadable record, with the new ctime; an audit re-tries it. An edit
// before the chmod drops the digest.
func TestUnreadableKeepsLastDigest(t *testing.T) {
	if os.Getuid() == 0 {
		runAsNobody(t, "TestUnreadableKeepsLastDigest")
		return
	}
	root := t.TempDir()
	kept, edited := filepath.Join(root, "kept"), filepath.Join(root, "edited")
	writeOld(t, kept, "k")
	writeOld(t, edited, "e")
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	was, ok, err := e.st.Get([]byte(kept))
	if err != nil || !ok || !was.HasDigest() {
		t.Fatalf("record before: %+v ok=%v err=%v", was, ok, err)
	}
	must(t, os.Chmod(kept, 0))
	writeOld(t, edited, "edited, then locked")
	must(t, os.Chmod(edited, 0))
	ctx := context.Background()
	e.ix.Changed(ctx, kept)
	e.ix.Changed(ctx, edited)
	wctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	must(t, e.ix.WaitIdle(wctx))
	rec, _, _ := e.st.Get([]byte(kept))
	if rec.State != store.StateUnreadable || !bytes.Equal(rec.Digest, was.Digest) || rec.Backend != was.Backend ||
		rec.HashedAt != was.HashedAt || rec.VerifiedAt != was.VerifiedAt || rec.CtimeNs == was.CtimeNs || !rec.Audited() {
		t.Errorf("unreadable record %+v, want the digest of %+v", rec, was)
	}
	if rec, _, _ := e.st.Get([]byte(edited)); rec.State != store.StateUnreadable || rec.HasDigest() {
		t.Errorf("edited, then unreadable: %+v, want no digest", rec)
	}
	if r, err := e.ix.Lookup(ctx, kept, false); err != nil || r.State != Unreadable {
		t.Errorf("lookup: %+v %v", r, err)
	}
}

// appendMore appends to the file p, as a writer changing it does; called
// from the hasher's gate, it reports a failure without stopping the test.
func appendMore(t *testing.T, p string) {
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Error(err)
		return
	}
	_, err = f.Write([]byte("more"))
	if err := errors.Join(err, f.Close()); err != nil {
		t.Error(err)
	}
}
