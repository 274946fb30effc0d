package dedup

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/store"
)

// The race tests stop a relink at one of its steps and, there, do what
// another process could: open the copy for writing, truncate it, chmod,
// chown, link or tag it, through its name or through a handle on the old
// copy taken before the exchange (a process that looked the name up just
// before it). Whatever they did must be in the file at the copy's name
// afterwards, and nowhere else.

// raceSetup mounts ext4 with a keeper "k" (the oldest) and its copy "t",
// recorded.
func raceSetup(t *testing.T) (*loopfs.FS, *store.Store, *Deduper, []byte) {
	t.Helper()
	data := content(40, 300_000)
	fs, st, d := hardlinkSetup(t, map[string][]byte{"k": data, "t": data})
	must(t, os.Chtimes(fs.Path("k"), aLongTimeAgo, aLongTimeAgo))
	recordAll(t, st, fs, "k", "t")
	return fs, st, d, data
}

// atSteps runs each function once, the first time a relink reaches its
// step.
func atSteps(t *testing.T, fns map[string]func()) {
	var mu sync.Mutex
	testHookStep = func(s string) {
		mu.Lock()
		fn := fns[s]
		delete(fns, s)
		mu.Unlock()
		if fn != nil {
			fn()
		}
	}
	t.Cleanup(func() { testHookStep = nil })
}

// waitsOnLease starts op, which must wait on the run's lease, and returns
// once the kernel told the lease holder (SIGIO). The channel gets op's
// error when it went through.
func waitsOnLease(t *testing.T, op func() error) <-chan error {
	sigio := make(chan os.Signal, 1)
	signal.Notify(sigio, syscall.SIGIO)
	defer signal.Stop(sigio)
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case <-sigio:
	case err := <-done:
		t.Errorf("the operation went through at once (%v): it did not wait on the lease", err)
		done <- err
	case <-time.After(10 * time.Second):
		t.Error("no SIGIO in 10 s: the operation did not wait on a lease")
	}
	return done
}

func appendTo(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errorsJoin(err, f.Close())
}

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// handle opens path with O_PATH: a process that has looked the name up,
// and opens or changes what it found later (through /proc/self/fd).
type handle struct {
	t *testing.T
	f *os.File
}

func (h *handle) take(path string) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	h.f = os.NewFile(uintptr(fd), path)
	h.t.Cleanup(func() { h.f.Close() })
}

// path is the handle's /proc path: opening it, or changing the file
// through it, reaches the file looked up, wherever its name went.
func (h *handle) path() string { return fmt.Sprintf("/proc/self/fd/%d", h.f.Fd()) }

// TestHardlinkWritersRace: a process that opens the copy for writing or
// truncates it while a relink runs, found by its name just before the
// exchange or just before the old copy goes, keeps what it wrote: the
// exchange is undone and the write lands in the copy at its name. Before,
// the write went to the removed old copy.
func TestHardlinkWritersRace(t *testing.T) {
	marker := []byte("written while the copy was relinked\n")
	for _, c := range []struct {
		name  string
		early bool                    // take a handle before the exchange and act through it after
		op    func(path string) error // path: the copy's name, or the handle's path
	}{
		{name: "appending, found just before the exchange", op: func(p string) error { return appendTo(p, marker) }},
		{name: "truncating, found just before the exchange", op: func(p string) error { return unix.Truncate(p, 1000) }},
		{name: "appending, found before the exchange, opened after", early: true, op: func(p string) error { return appendTo(p, marker) }},
		{name: "truncating, found before the exchange, opened after", early: true, op: func(p string) error { return unix.Truncate(p, 1000) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, st, d, data := raceSetup(t)
			tIno := lstat(t, fs.Path("t")).Ino
			h := &handle{t: t}
			var done <-chan error
			if c.early {
				atSteps(t, map[string]func(){
					"linked":    func() { h.take(fs.Path("t")) },
					"exchanged": func() { done = waitsOnLease(t, func() error { return c.op(h.path()) }) },
				})
			} else {
				atSteps(t, map[string]func(){
					"linked": func() { done = waitsOnLease(t, func() error { return c.op(fs.Path("t")) }) },
				})
			}
			_, res, err := runDedup(t, d, Request{PlanOptions: PlanOptions{Mode: Hardlink}})
			if done == nil {
				t.Fatalf("the run never reached the step: done %d, skips %v, %v", res.Done, res.Skips, err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the other process: %v", err)
			}
			if err != nil || res.Done != 0 || res.Skipped[Reason("raced")] != 1 {
				t.Errorf("done %d, skips %v, %v; want the pair undone as raced", res.Done, res.Skips, err)
			}
			want := append(append([]byte{}, data...), marker...)
			if bytes.Contains([]byte(c.name), []byte("truncating")) {
				want = data[:1000]
			}
			assertContent(t, fs.Path("t"), want)
			assertContent(t, fs.Path("k"), data)
			if fi := lstat(t, fs.Path("t")); fi.Ino != tIno {
				t.Errorf("t is inode %d, want its own %d", fi.Ino, tIno)
			}
			assertNoTemp(t, fs.Dir)
			assertNoIntents(t, st)
		})
	}
}

// TestHardlinkMetadataRace: a chmod, chown, link or xattr made on the copy
// (or a chmod or link of the keeper) just before the exchange, or through
// a handle on the old copy just after it, is kept where it was made: the
// exchange is undone. Before, the copy's name showed the keeper's owner
// and mode after the user's chmod returned, and a new link of the copy
// named another file.
func TestHardlinkMetadataRace(t *testing.T) {
	for _, c := range []struct {
		name  string
		step  string                              // where the change is made
		early bool                                // through a handle taken before the exchange
		op    func(fs *loopfs.FS, p string) error // p: the copy's name, or the handle's path
		check func(t *testing.T, fs *loopfs.FS)
	}{
		{name: "chmod of the copy just before the exchange", step: "linked",
			op: func(fs *loopfs.FS, p string) error { return os.Chmod(p, 0o600) }, check: wantMode("t", 0o600)},
		{name: "chown of the copy just before the exchange", step: "linked",
			op: func(fs *loopfs.FS, p string) error { return os.Chown(p, 4321, 4321) }, check: wantOwner("t", 4321)},
		{name: "a link to the copy made just before the exchange", step: "linked",
			op: func(fs *loopfs.FS, p string) error { return os.Link(p, fs.Path("t2")) }, check: wantSameInode("t", "t2")},
		{name: "chmod through a handle just after the exchange", step: "exchanged", early: true,
			op: func(fs *loopfs.FS, p string) error { return os.Chmod(p, 0o600) }, check: wantMode("t", 0o600)},
		{name: "chown through a handle just after the exchange", step: "exchanged", early: true,
			op: func(fs *loopfs.FS, p string) error { return os.Chown(p, 4321, 4321) }, check: wantOwner("t", 4321)},
		{name: "a link made through a handle just after the exchange", step: "exchanged", early: true,
			op: func(fs *loopfs.FS, p string) error {
				return unix.Linkat(unix.AT_FDCWD, p, unix.AT_FDCWD, fs.Path("t2"), unix.AT_SYMLINK_FOLLOW)
			}, check: wantSameInode("t", "t2")},
		{name: "an xattr set through a handle just after the exchange", step: "exchanged", early: true,
			op: func(fs *loopfs.FS, p string) error { return unix.Setxattr(p, "user.tag", []byte("mine"), 0) },
			check: func(t *testing.T, fs *loopfs.FS) {
				if v, err := getxattrPath(fs.Path("t"), "user.tag"); err != nil || string(v) != "mine" {
					t.Errorf("t's user.tag: %q, %v; want the xattr set during the exchange", v, err)
				}
			}},
		{name: "chmod of the keeper just before the exchange", step: "linked",
			op: func(fs *loopfs.FS, p string) error { return os.Chmod(fs.Path("k"), 0o600) }, check: wantMode("t", 0o644)},
		{name: "a link to the keeper made just before the exchange", step: "linked",
			op: func(fs *loopfs.FS, p string) error { return os.Link(fs.Path("k"), fs.Path("k.elsewhere")) },
			check: func(t *testing.T, fs *loopfs.FS) {
				if lstat(t, fs.Path("t")).Ino == lstat(t, fs.Path("k")).Ino {
					t.Error("t was linked to a keeper that has a link the run does not know")
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, st, d, data := raceSetup(t)
			tIno := lstat(t, fs.Path("t")).Ino
			h := &handle{t: t}
			var opErr error
			fns := map[string]func(){c.step: func() { opErr = c.op(fs, fs.Path("t")) }}
			if c.early {
				fns["linked"] = func() { h.take(fs.Path("t")) }
				fns[c.step] = func() { opErr = c.op(fs, h.path()) }
			}
			atSteps(t, fns)
			_, res, err := runDedup(t, d, Request{PlanOptions: PlanOptions{Mode: Hardlink}})
			if opErr != nil {
				t.Fatalf("the change: %v", opErr)
			}
			if err != nil || res.Done != 0 || res.Skipped[Reason("raced")] != 1 {
				t.Errorf("done %d, skips %v, %v; want the pair undone as raced", res.Done, res.Skips, err)
			}
			if fi := lstat(t, fs.Path("t")); fi.Ino != tIno {
				t.Errorf("t is inode %d, want its own %d", fi.Ino, tIno)
			}
			c.check(t, fs)
			assertContent(t, fs.Path("t"), data)
			assertContent(t, fs.Path("k"), data)
			assertNoTemp(t, fs.Dir)
			assertNoIntents(t, st)
		})
	}
}

func wantMode(name string, mode os.FileMode) func(t *testing.T, fs *loopfs.FS) {
	return func(t *testing.T, fs *loopfs.FS) {
		t.Helper()
		fi, err := os.Lstat(fs.Path(name))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, %v; want %v", name, fi.Mode().Perm(), err, mode)
		}
	}
}

func wantOwner(name string, uid uint32) func(t *testing.T, fs *loopfs.FS) {
	return func(t *testing.T, fs *loopfs.FS) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(fs.Path(name), &st); err != nil || st.Uid != uid {
			t.Errorf("%s: owner %d, %v; want %d", name, st.Uid, err, uid)
		}
	}
}

func wantSameInode(a, b string) func(t *testing.T, fs *loopfs.FS) {
	return func(t *testing.T, fs *loopfs.FS) {
		t.Helper()
		if ia, ib := lstat(t, fs.Path(a)).Ino, lstat(t, fs.Path(b)).Ino; ia != ib {
			t.Errorf("%s is inode %d and %s inode %d: the link made to it names another file", a, ia, b, ib)
		}
	}
}

func getxattrPath(path, name string) ([]byte, error) {
	b := make([]byte, 256)
	n, err := unix.Lgetxattr(path, name, b)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}
