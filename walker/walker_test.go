package walker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/ignore"
)

// tree creates files (name → content) and directories (name ending in /).
func tree(t *testing.T, root string, spec ...string) {
	t.Helper()
	for _, s := range spec {
		p := filepath.Join(root, s)
		if strings.HasSuffix(s, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func collect(t *testing.T, root string, opts Options) (map[string]fsstat.FileInfo, error) {
	t.Helper()
	got := map[string]fsstat.FileInfo{}
	err := Walk(context.Background(), root, opts, func(e Entry) error {
		rel, _ := filepath.Rel(root, e.Path)
		if _, dup := got[rel]; dup {
			t.Errorf("%s delivered twice", rel)
		}
		got[rel] = e.Info
		return nil
	})
	return got, err
}

func keys(m map[string]fsstat.FileInfo) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestWalkDeliversRegularFilesOnly(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	tree(t, root, "a", "d/b", "d/e/c", "empty/", "d/e/f/g/h")
	tree(t, outside, "secret", "sub/x")
	// Symlinks to a file and to a directory (inside and outside the root)
	// are not followed, and a FIFO is not opened (opening it would block).
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "link-file"))
	os.Symlink(outside, filepath.Join(root, "link-dir"))
	os.Symlink(filepath.Join(root, "d"), filepath.Join(root, "d/e/loop"))
	if err := unix.Mkfifo(filepath.Join(root, "d/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(root, "sock"))
	if err == nil {
		defer l.Close()
	}

	for _, workers := range []int{1, 2, 4} {
		done := make(chan struct{})
		var got map[string]fsstat.FileInfo
		go func() {
			defer close(done)
			got, err = collect(t, root, Options{Workers: workers})
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("walk blocked (FIFO opened?)")
		}
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"a", "d/b", "d/e/c", "d/e/f/g/h"}
		if fmt.Sprint(keys(got)) != fmt.Sprint(want) {
			t.Errorf("workers=%d: got %v, want %v", workers, keys(got), want)
		}
		for rel, fi := range got {
			ref, _ := fsstat.Lstat(filepath.Join(root, rel))
			if !fi.Same(ref) || !fi.IsRegular() || fi.Size != int64(len(rel)) {
				t.Errorf("%s: info %+v, lstat %+v", rel, fi, ref)
			}
		}
	}
}

// With NoStat the walk delivers the same files, and the same things are
// left out, without a stat of any file: Info holds only the mode.
func TestWalkNoStat(t *testing.T) {
	root := t.TempDir()
	tree(t, root, "a", "d/b", "d/e/c", "empty/", "d/e/f/g/h")
	os.Symlink(filepath.Join(root, "a"), filepath.Join(root, "link-file"))
	os.Symlink(filepath.Join(root, "d"), filepath.Join(root, "d/e/loop"))
	if err := unix.Mkfifo(filepath.Join(root, "d/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	stated, err := collect(t, root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := collect(t, root, Options{NoStat: true})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys(got)) != fmt.Sprint(keys(stated)) {
		t.Errorf("NoStat walked %v, a walk with stats %v", keys(got), keys(stated))
	}
	for rel, fi := range got {
		if !fi.IsRegular() || fi != (fsstat.FileInfo{Mode: fi.Mode}) {
			t.Errorf("%s: info %+v, want the mode alone", rel, fi)
		}
	}
	err = Walk(context.Background(), root, Options{NoStat: true}, func(e Entry) error {
		if e.Stated {
			t.Errorf("%s: NoStat entry says it was stat'ed", e.Path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = Walk(context.Background(), root, Options{}, func(e Entry) error {
		if !e.Stated {
			t.Errorf("%s: stat'ed entry says it was not", e.Path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestWalkNonUTF8Names(t *testing.T) {
	root := t.TempDir()
	names := []string{"caf\xe9", "\xff\xfe.bin", "ok é", "dir\x80/in\x81side"}
	tree(t, root, names...)
	got, err := collect(t, root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, ok := got[n]; !ok {
			t.Errorf("%q missing; got %q", n, keys(got))
		}
	}
}

func TestWalkIgnore(t *testing.T) {
	root := t.TempDir()
	tree(t, root, ".git/objects/aa", ".git/config", "src/.git/HEAD", "src/main.go", "x.tmp", "keep/x.tmp.txt", "build/out")
	m := ignore.MustNew(append(ignore.Defaults(), "*.tmp", "/build/"))
	got, err := collect(t, root, Options{Ignore: m})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"keep/x.tmp.txt", "src/main.go"}
	if fmt.Sprint(keys(got)) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", keys(got), want)
	}
}

func TestWalkErrorsAreReportedAndWalkGoesOn(t *testing.T) {
	root := t.TempDir()
	tree(t, root, "ok/a", "bad/b", "ok2/c")
	// As root a mode-000 directory is still readable, so the failure comes
	// from the open seam; TestWalkPermissionDenied covers the real EACCES.
	var mu sync.Mutex
	var errs []string
	opts := Options{
		openDir: func(path string) (int, error) {
			if filepath.Base(path) == "bad" {
				return -1, &os.PathError{Op: "open", Path: path, Err: unix.EACCES}
			}
			return openDirAt(path)
		},
		OnError: func(path string, err error) {
			mu.Lock()
			errs = append(errs, path)
			mu.Unlock()
			if !errors.Is(err, unix.EACCES) {
				t.Errorf("%s: %v", path, err)
			}
		},
	}
	got, err := collect(t, root, opts)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys(got)) != "[ok/a ok2/c]" {
		t.Errorf("got %v", keys(got))
	}
	if len(errs) != 1 || errs[0] != filepath.Join(root, "bad") {
		t.Errorf("errors reported for %v", errs)
	}
}

// TestWalkPermissionDenied walks a mode-000 directory as an unprivileged
// user: as root the test re-runs itself as nobody (uid 65534).
func TestWalkPermissionDenied(t *testing.T) {
	if dir := os.Getenv("WALKER_EACCES_ROOT"); dir != "" {
		var denied []string
		n := 0
		err := Walk(context.Background(), dir, Options{OnError: func(p string, err error) {
			if errors.Is(err, unix.EACCES) {
				denied = append(denied, p)
			}
		}}, func(Entry) error { n++; return nil })
		if err != nil || n != 2 || len(denied) != 1 || filepath.Base(denied[0]) != "locked" {
			t.Fatalf("err %v, files %d, denied %v", err, n, denied)
		}
		return
	}
	base, err := os.MkdirTemp("", "walker-eacces-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Chmod(filepath.Join(base, "locked"), 0o755)
		os.RemoveAll(base)
	})
	tree(t, base, "a", "locked/secret", "z/b")
	if err := os.Chmod(filepath.Join(base, "locked"), 0); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		os.Setenv("WALKER_EACCES_ROOT", base)
		defer os.Unsetenv("WALKER_EACCES_ROOT")
		TestWalkPermissionDenied(t)
		return
	}
	os.Chmod(base, 0o755)
	for _, f := range []string{"a", "z", "z/b"} {
		os.Chown(filepath.Join(base, f), 65534, 65534)
	}
	// The test binary lives in a private build directory: copy it where
	// nobody can run it.
	binDir, err := os.MkdirTemp("", "walker-bin-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(binDir)
	os.Chmod(binDir, 0o755)
	bin := filepath.Join(binDir, "walker.test")
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestWalkPermissionDenied$", "-test.v")
	cmd.Env = append(os.Environ(), "WALKER_EACCES_ROOT="+base)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestWalkPermissionDenied") {
		t.Fatalf("the unprivileged walk did not run:\n%s", out)
	}
}

func TestWalkFnErrorStops(t *testing.T) {
	root := t.TempDir()
	for i := range 2000 {
		tree(t, root, fmt.Sprintf("d%d/f%d", i%50, i))
	}
	stop := errors.New("stop")
	n := 0
	err := Walk(context.Background(), root, Options{Workers: 4}, func(Entry) error {
		n++
		if n == 10 {
			return stop
		}
		return nil
	})
	if err != stop || n != 10 {
		t.Errorf("err %v after %d calls", err, n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Walk(ctx, root, Options{}, func(Entry) error { return nil }); err != context.Canceled {
		t.Errorf("cancelled walk: %v", err)
	}
}

func TestWalkBadRoot(t *testing.T) {
	root := t.TempDir()
	tree(t, root, "f")
	for _, p := range []string{filepath.Join(root, "missing"), filepath.Join(root, "f")} {
		if err := Walk(context.Background(), p, Options{}, func(Entry) error { return nil }); !errors.Is(err, ErrRoot) {
			t.Errorf("%s: %v", p, err)
		}
	}
}

func TestWalkWideDirectoryBeyondQueue(t *testing.T) {
	root := t.TempDir()
	// More subdirectories than the queue holds: the rest are walked inline.
	n := queueCap + 100
	for i := range n {
		if err := os.Mkdir(filepath.Join(root, fmt.Sprint(i)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, fmt.Sprint(i), "f"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := collect(t, root, Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Errorf("%d files, want %d", len(got), n)
	}
}

func TestWalkSubdirWithIgnoreRoot(t *testing.T) {
	root := t.TempDir()
	tree(t, root, "a/build/x", "a/b/build/y", "a/b/keep", "build/z")
	// "/a/b/build" is anchored at the watched root; walking root/a/b for a
	// rescan must still apply it.
	m := ignore.MustNew([]string{"/a/b/build/"})
	sub := filepath.Join(root, "a/b")
	got, err := collect(t, sub, Options{Ignore: m, IgnoreRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys(got)) != "[keep]" {
		t.Errorf("got %v", keys(got))
	}
	// Without IgnoreRoot the pattern is relative to a/b and matches nothing.
	got, _ = collect(t, sub, Options{Ignore: m})
	if fmt.Sprint(keys(got)) != "[build/y keep]" {
		t.Errorf("got %v", keys(got))
	}
	if err := Walk(context.Background(), sub, Options{IgnoreRoot: filepath.Join(root, "other")}, func(Entry) error { return nil }); !errors.Is(err, ErrRoot) {
		t.Errorf("walk outside IgnoreRoot: %v", err)
	}
}

func TestWalkOneFileSystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs for the test needs root")
	}
	root := t.TempDir()
	tree(t, root, "a", "mnt/")
	mnt := filepath.Join(root, "mnt")
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount tmpfs here: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	tree(t, mnt, "on-tmpfs")
	got, err := collect(t, root, Options{OneFileSystem: true})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys(got)) != "[a]" {
		t.Errorf("OneFileSystem: got %v", keys(got))
	}
	got, _ = collect(t, root, Options{})
	if fmt.Sprint(keys(got)) != "[a mnt/on-tmpfs]" {
		t.Errorf("without OneFileSystem: got %v", keys(got))
	}
}

func TestWalkSymlinkedRoot(t *testing.T) {
	real := t.TempDir()
	tree(t, real, "a", "sub/b")
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	// The root as given is followed; nothing below it is.
	got, err := collect(t, link, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys(got)) != "[a sub/b]" {
		t.Errorf("got %v", keys(got))
	}
}

func TestWalkBatches(t *testing.T) {
	root := t.TempDir()
	for i := range 600 {
		tree(t, root, fmt.Sprintf("big/%d", i))
	}
	tree(t, root, "small/a", "small/b")
	seen := map[string]bool{}
	var kept [][]Entry
	err := WalkBatches(context.Background(), root, Options{}, func(b []Entry) error {
		if len(b) == 0 || len(b) > batchSize {
			t.Errorf("batch of %d", len(b))
		}
		d := filepath.Dir(b[0].Path)
		for _, e := range b {
			if filepath.Dir(e.Path) != d {
				t.Errorf("batch mixes %s and %s", d, filepath.Dir(e.Path))
			}
			seen[e.Path] = true
		}
		kept = append(kept, b)
		return nil
	})
	if err != nil || len(seen) != 602 {
		t.Errorf("err %v, %d files", err, len(seen))
	}
	// fn owns its batches: none was reused for later entries.
	again := map[string]bool{}
	for _, b := range kept {
		for _, e := range b {
			again[e.Path] = true
		}
	}
	if len(again) != len(seen) {
		t.Errorf("the batches kept hold %d paths at the end, %d when handed over", len(again), len(seen))
	}
}

// A directory whose entries fill several getdents buffers is read whole,
// each file once with its own lstat identity.
func TestWalkDirectoryLargerThanOneRead(t *testing.T) {
	root := t.TempDir()
	long := strings.Repeat("n", 200)
	n := 2 * readBuf / 200 // about twice the buffer
	for i := range n {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("%s%05d", long, i)), []byte(fmt.Sprint(i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := collect(t, root, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d files, want %d", len(got), n)
	}
	for rel, info := range got {
		want, err := fsstat.Lstat(filepath.Join(root, rel))
		if err != nil || !want.Same(info) {
			t.Errorf("%s: walked %+v, lstat %+v (%v)", rel, info, want, err)
		}
	}
}

// An entry whose directory gives no type (DT_UNKNOWN, as some file systems
// do) is typed by its lstat: a file is delivered, a directory walked, the
// rest skipped.
func TestWalkUnknownEntryType(t *testing.T) {
	root := t.TempDir()
	tree(t, root, "file", "sub/")
	if err := os.Symlink("file", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	w := &walk{opts: Options{Ignore: matchNothing{}}}
	parent := dir{path: root}
	var batch []Entry
	if _, ok := w.entry(parent, fd, []byte("file\x00"), unix.DT_UNKNOWN, &batch); ok || len(batch) != 1 || batch[0].Path != root+"/file" {
		t.Errorf("file: dir %v, batch %v", ok, batch)
	}
	if d, ok := w.entry(parent, fd, []byte("sub\x00"), unix.DT_UNKNOWN, &batch); !ok || d.path != root+"/sub" || d.rel != "sub" {
		t.Errorf("sub: %+v %v", d, ok)
	}
	if _, ok := w.entry(parent, fd, []byte("link\x00"), unix.DT_UNKNOWN, &batch); ok || len(batch) != 1 {
		t.Errorf("link: dir %v, batch %v", ok, batch)
	}
	// NoStat leaves only the files whose type the entry gives unstat'ed.
	w.opts.NoStat = true
	batch = nil
	if _, ok := w.entry(parent, fd, []byte("file\x00"), unix.DT_UNKNOWN, &batch); ok || len(batch) != 1 || !batch[0].Stated || batch[0].Info.Ino == 0 {
		t.Errorf("file of unknown type with NoStat: dir %v, batch %+v", ok, batch)
	}
}

// TestWalkBeforeDir: BeforeDir is called once for every directory read,
// the root included, before the directory is read: a file it creates in
// the directory is delivered, which it would not be if the directory had
// been read first.
func TestWalkBeforeDir(t *testing.T) {
	root := t.TempDir()
	tree(t, root, "a/b/f1", "a/c/", "d/f2", "f3", ".ignored/f4")
	var mu sync.Mutex
	called := map[string]int{}
	opts := Options{
		Workers: 3,
		Ignore:  ignore.MustNew([]string{".ignored/"}),
		BeforeDir: func(ctx context.Context, dir string) error {
			if ctx == nil || ctx.Err() != nil {
				t.Errorf("BeforeDir(%s): no live context", dir)
			}
			mu.Lock()
			called[dir]++
			mu.Unlock()
			return os.WriteFile(filepath.Join(dir, "made-before"), nil, 0o644)
		},
	}
	got, err := collect(t, root, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"", "a", "a/b", "a/c", "d"} {
		if n := called[filepath.Join(root, d)]; n != 1 {
			t.Errorf("BeforeDir(%q) called %d times, want 1", d, n)
		}
		if _, ok := got[filepath.Join(d, "made-before")]; !ok {
			t.Errorf("%s: the file made in BeforeDir was not delivered: the directory was read first", filepath.Join(d, "made-before"))
		}
	}
	if len(called) != 5 {
		t.Errorf("BeforeDir called for %v, want the 5 directories walked (not the ignored one)", called)
	}
}

// TestWalkBeforeDirErrorEnds: an error of BeforeDir ends the walk and is
// what Walk returns; the directory it was called for is not read.
func TestWalkBeforeDirErrorEnds(t *testing.T) {
	root := t.TempDir()
	for i := range 200 {
		tree(t, root, fmt.Sprintf("d%d/f%d", i%20, i))
	}
	refused := errors.New("refused")
	bad := filepath.Join(root, "d7")
	err := Walk(context.Background(), root, Options{Workers: 2, BeforeDir: func(_ context.Context, dir string) error {
		if dir == bad {
			return refused
		}
		return nil
	}}, func(e Entry) error {
		if filepath.Dir(e.Path) == bad {
			t.Errorf("%s delivered from the refused directory", e.Path)
		}
		return nil
	})
	if !errors.Is(err, refused) {
		t.Errorf("Walk returned %v, want the BeforeDir error", err)
	}
	// The root refused: nothing is read.
	err = Walk(context.Background(), root, Options{BeforeDir: func(context.Context, string) error { return refused }}, func(e Entry) error {
		t.Errorf("%s delivered although the root was refused", e.Path)
		return nil
	})
	if !errors.Is(err, refused) {
		t.Errorf("root refused: Walk returned %v", err)
	}
}

// TestWalkBeforeDirReplaced: BeforeDir is called before a directory is
// opened, the root included, so one replaced meanwhile is read as it is
// afterwards.
func TestWalkBeforeDirReplaced(t *testing.T) {
	for _, which := range []string{"r", "r/s"} {
		parent := t.TempDir()
		root := filepath.Join(parent, "r")
		tree(t, parent, "r/s/old")
		replaced := filepath.Join(parent, which)
		before := func(_ context.Context, dir string) error {
			if dir != replaced {
				return nil
			}
			if err := os.Rename(dir, filepath.Join(t.TempDir(), "old")); err != nil {
				return err
			}
			tree(t, parent, which+"/s/fresh")
			return nil
		}
		got, err := collect(t, root, Options{BeforeDir: before})
		if err != nil {
			t.Fatal(err)
		}
		want := "[s/fresh]"
		if which == "r/s" {
			want = "[s/s/fresh]"
		}
		if fmt.Sprint(keys(got)) != want {
			t.Errorf("%s replaced: walked %v, want %s: it was opened before BeforeDir let it", which, keys(got), want)
		}
	}
}
