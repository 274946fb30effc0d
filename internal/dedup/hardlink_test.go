package dedup

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/store"
)

// hardlinkSetup mounts an ext4 image, writes the files and records them.
func hardlinkSetup(t *testing.T, files map[string][]byte) (*loopfs.FS, *store.Store, *Deduper) {
	t.Helper()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	st := openStore(t)
	for name, data := range files {
		writeFile(t, fs.Path(name), data)
	}
	return fs, st, New(st, Options{Intents: NewMetaIntents(st)})
}

func recordAll(t *testing.T, st *store.Store, fs *loopfs.FS, names ...string) {
	t.Helper()
	for _, n := range names {
		record(t, st, fs.Path(n))
	}
}

// assertNoTemp fails if a temporary name is left anywhere under dir.
func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(e.Name(), tempPrefix) {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

func assertNoIntents(t *testing.T, st *store.Store) {
	t.Helper()
	ins, err := NewMetaIntents(st).Intents()
	if err != nil || len(ins) != 0 {
		t.Errorf("intents left in the journal: %v, %v", ins, err)
	}
}

// TestHardlink links two duplicates to their keeper, the inode with two
// names: the contents stay, every name shows the keeper's inode, the space
// comes back, nothing temporary remains.
func TestHardlink(t *testing.T) {
	data := content(5, 3<<20)
	fs, st, d := hardlinkSetup(t, map[string][]byte{"keep": data, "a/dup": data, "b/dup": data})
	if err := os.Link(fs.Path("b/dup"), fs.Path("b/dup2")); err != nil {
		t.Fatal(err)
	}
	recordAll(t, st, fs, "keep", "a/dup", "b/dup", "b/dup2")
	keeper := lstat(t, fs.Path("b/dup"))
	free := fs.Free(t)
	var rehashed rehashLog
	d.opt.Indexer = &rehashed
	plan, res, err := runDedup(t, d, Request{PlanOptions: PlanOptions{Mode: Hardlink}})
	if err != nil || res.Done != 2 || len(res.Skips) != 0 {
		t.Fatalf("done %d, skips %v, %v; want 2 done", res.Done, res.Skips, err)
	}
	if plan.Frees != 2*int64(len(data)) {
		t.Errorf("plan frees %d, want %d", plan.Frees, 2*len(data))
	}
	for _, n := range []string{"keep", "a/dup", "b/dup", "b/dup2"} {
		assertContent(t, fs.Path(n), data)
		if fi := lstat(t, fs.Path(n)); fi.Ino != keeper.Ino {
			t.Errorf("%s is inode %d, want the keeper's %d", n, fi.Ino, keeper.Ino)
		}
	}
	if gained := fs.Free(t) - free; gained < 2*int64(len(data)) {
		t.Errorf("%d bytes more free, want at least %d", gained, 2*len(data))
	}
	if res.Freed < 2*int64(len(data)) {
		t.Errorf("reported freed %d, want at least %d", res.Freed, 2*len(data))
	}
	got := slices.Compact(slices.Sorted(slices.Values(rehashed.list())))
	if want := []string{fs.Path("a/dup"), fs.Path("b/dup"), fs.Path("b/dup2"), fs.Path("keep")}; !slices.Equal(got, want) {
		t.Errorf("handed back to the indexer: %v, want the relinked names and the keeper's: %v", got, want)
	}
	assertNoTemp(t, fs.Dir)
	assertNoIntents(t, st)
}

// TestHardlinkRefuses: what a link would change, or a file in use, skips
// the pair and leaves both files as they were.
func TestHardlinkRefuses(t *testing.T) {
	data := content(6, 100_000)
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, fs *loopfs.FS) // before the files are recorded
		after func(t *testing.T, fs *loopfs.FS) // after, before the run
		want  Reason
	}{
		{"mode", func(t *testing.T, fs *loopfs.FS) { os.Chmod(fs.Path("t"), 0o600) }, nil, SkipMetadata},
		{"owner", func(t *testing.T, fs *loopfs.FS) { os.Chown(fs.Path("t"), 1234, 1234) }, nil, SkipMetadata},
		{"xattr", func(t *testing.T, fs *loopfs.FS) {
			if err := unix.Setxattr(fs.Path("t"), "user.origin", []byte("camera"), 0); err != nil {
				t.Fatal(err)
			}
		}, nil, SkipXattrs},
		{"link outside the index", func(t *testing.T, fs *loopfs.FS) {
			os.Mkdir(fs.Path("elsewhere"), 0o755)
			if err := os.Link(fs.Path("t"), fs.Path("elsewhere/t")); err != nil {
				t.Fatal(err)
			}
		}, nil, SkipLinks},
		{"open for writing", nil, func(t *testing.T, fs *loopfs.FS) { holdOpen(t, fs.Path("t")) }, SkipOpen},
		{"keeper open for writing", nil, func(t *testing.T, fs *loopfs.FS) { holdOpen(t, fs.Path("k")) }, SkipOpen},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, st, d := hardlinkSetup(t, map[string][]byte{"k": data, "t": data})
			os.Chtimes(fs.Path("k"), aLongTimeAgo, aLongTimeAgo) // the keeper, whatever the case changes
			if c.setup != nil {
				c.setup(t, fs)
			}
			recordAll(t, st, fs, "k", "t")
			if c.after != nil {
				c.after(t, fs)
			}
			before := idOf(lstat(t, fs.Path("t")))
			_, res, err := runDedup(t, d, Request{PlanOptions: PlanOptions{Mode: Hardlink, Paths: [][]byte{[]byte(fs.Path("k")), []byte(fs.Path("t"))}}})
			if err != nil || res.Done != 0 || res.Skipped[c.want] != 1 {
				t.Fatalf("done %d, skipped %v (%v), %v; want one %s", res.Done, res.Skipped, res.Skips, err, c.want)
			}
			if got := idOf(lstat(t, fs.Path("t"))); got != before {
				t.Errorf("the target changed: %+v, was %+v", got, before)
			}
			assertContent(t, fs.Path("t"), data)
			if c.want == SkipXattrs && !strings.Contains(res.Skips[0].Detail, "user.origin") {
				t.Errorf("the skip does not say what would be lost: %q", res.Skips[0].Detail)
			}
			assertNoTemp(t, fs.Dir)
			assertNoIntents(t, st)
		})
	}
}

// aLongTimeAgo makes a file the oldest, so the planner keeps it.
var aLongTimeAgo = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

// holdOpen starts a process that holds path open for writing until the
// test ends.
func holdOpen(t *testing.T, path string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `exec 3>>"$1"; echo ready; read x`, "sh", path)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the writer did not start: %q %v", line, err)
	}
}

// TestHardlinkDiffers: a wrong record is caught by the byte comparison.
func TestHardlinkDiffers(t *testing.T) {
	a, b := content(7, 50_000), content(7, 50_000)
	b[49_999] ^= 0x80
	fs, st, d := hardlinkSetup(t, map[string][]byte{"a": a, "b": b})
	ra := record(t, st, fs.Path("a"))
	if err := st.Put(context.Background(), []byte(fs.Path("b")), recordOf(lstat(t, fs.Path("b")), ra.Digest, ra.HashedAt)); err != nil {
		t.Fatal(err)
	}
	var rehashed rehashLog
	d.opt.Indexer = &rehashed
	_, res, err := runDedup(t, d, Request{PlanOptions: PlanOptions{Mode: Hardlink}})
	if err != nil || res.Done != 0 || res.Skipped[SkipDiffers] != 1 || len(rehashed.list()) != 2 {
		t.Fatalf("done %d, skipped %v, rehashed %v, %v; want one skip for differing bytes, both rehashed", res.Done, res.Skipped, rehashed.list(), err)
	}
	assertContent(t, fs.Path("a"), a)
	assertContent(t, fs.Path("b"), b)
}

// TestRecover puts the directory in each state a crash can leave and
// checks that recovery leaves the name with its content and no temporary
// name, and drops the intent.
func TestRecover(t *testing.T) {
	data := content(8, 70_000)
	for _, c := range []struct {
		name      string
		legacy    bool                                         // an intent of a journal that did not record what the files were
		state     func(t *testing.T, fs *loopfs.FS, in Intent) // from "t" and "k" as they were
		wantInode string                                       // which file "t" names afterwards
		wantData  []byte
		wantTemp  bool
		wantKept  []byte // an old copy kept beside "t"
	}{
		{name: "nothing done", state: func(t *testing.T, fs *loopfs.FS, in Intent) {}, wantInode: "t", wantData: data},
		{name: "linked", state: func(t *testing.T, fs *loopfs.FS, in Intent) {
			must(t, os.Link(fs.Path("k"), fs.Path(in.Temp)))
		}, wantInode: "t", wantData: data},
		{name: "exchanged", state: func(t *testing.T, fs *loopfs.FS, in Intent) {
			must(t, os.Link(fs.Path("k"), fs.Path(in.Temp)))
			must(t, unix.Renameat2(unix.AT_FDCWD, fs.Path(in.Temp), unix.AT_FDCWD, fs.Path("t"), unix.RENAME_EXCHANGE))
		}, wantInode: "k", wantData: data},
		{name: "exchanged, then the old target written", state: func(t *testing.T, fs *loopfs.FS, in Intent) {
			must(t, os.Link(fs.Path("k"), fs.Path(in.Temp)))
			must(t, unix.Renameat2(unix.AT_FDCWD, fs.Path(in.Temp), unix.AT_FDCWD, fs.Path("t"), unix.RENAME_EXCHANGE))
			must(t, os.WriteFile(fs.Path(in.Temp), []byte("written meanwhile"), 0o644))
		}, wantInode: "t", wantData: []byte("written meanwhile")},
		{name: "exchanged, then the old target written, in an older journal", legacy: true, state: func(t *testing.T, fs *loopfs.FS, in Intent) {
			must(t, os.Link(fs.Path("k"), fs.Path(in.Temp)))
			must(t, unix.Renameat2(unix.AT_FDCWD, fs.Path(in.Temp), unix.AT_FDCWD, fs.Path("t"), unix.RENAME_EXCHANGE))
			must(t, os.WriteFile(fs.Path(in.Temp), []byte("written meanwhile"), 0o644))
		}, wantInode: "k", wantData: data, wantKept: []byte("written meanwhile")},
		{name: "done", state: func(t *testing.T, fs *loopfs.FS, in Intent) {
			must(t, os.Link(fs.Path("k"), fs.Path(in.Temp)))
			must(t, unix.Renameat2(unix.AT_FDCWD, fs.Path(in.Temp), unix.AT_FDCWD, fs.Path("t"), unix.RENAME_EXCHANGE))
			must(t, os.Remove(fs.Path(in.Temp)))
		}, wantInode: "k", wantData: data},
		{name: "a stranger at the temporary name", state: func(t *testing.T, fs *loopfs.FS, in Intent) {
			must(t, os.WriteFile(fs.Path(in.Temp), []byte("not ours"), 0o644))
		}, wantInode: "t", wantData: data, wantTemp: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, st, d := hardlinkSetup(t, map[string][]byte{"k": data, "t": data})
			k, tg := lstat(t, fs.Path("k")), lstat(t, fs.Path("t"))
			in := intentOf(t, st, fs, "k", "t")
			if c.legacy {
				in.Was, in.DirIno = nil, 0
			}
			must(t, d.opt.Intents.PutIntent(context.Background(), in))
			c.state(t, fs, in)
			err := d.Recover(context.Background())
			if c.wantTemp != errors.Is(err, ErrForeign) || !c.wantTemp && err != nil {
				t.Errorf("Recover: %v", err)
			}
			want := map[string]uint64{"t": tg.Ino, "k": k.Ino}[c.wantInode]
			if fi := lstat(t, fs.Path("t")); fi.Ino != want {
				t.Errorf("t is inode %d, want %s's %d", fi.Ino, c.wantInode, want)
			}
			assertContent(t, fs.Path("t"), c.wantData)
			assertContent(t, fs.Path("k"), data)
			if _, err := os.Lstat(fs.Path(in.Temp)); (err == nil) != c.wantTemp {
				t.Errorf("temporary name present: %v, want %v", err == nil, c.wantTemp)
			}
			kept := keptNames(t, fs.Dir)
			switch {
			case c.wantKept == nil && len(kept) > 0:
				t.Errorf("old copies kept: %v", kept)
			case c.wantKept != nil && len(kept) != 1:
				t.Errorf("old copies kept: %v, want one", kept)
			case c.wantKept != nil:
				assertContent(t, kept[0], c.wantKept)
			}
			assertNoIntents(t, st) // a file in the way is reported once, not again and again
			if c.wantTemp {
				// A hardlink run goes ahead, and leaves the stranger alone.
				recordAll(t, st, fs, "k", "t")
				_, res, err := runDedup(t, d, Request{PlanOptions: PlanOptions{Mode: Hardlink}})
				if err != nil || res.Done != 1 {
					t.Errorf("a run after recovery: done %d, %v", res.Done, err)
				}
				assertContent(t, fs.Path(in.Temp), []byte("not ours"))
			}
		})
	}
}

// intentOf is the intent a relink of target (a name in fs.Dir) to keeper
// writes, with both files as they are now. It records target.
func intentOf(t *testing.T, st *store.Store, fs *loopfs.FS, keeper, target string) Intent {
	t.Helper()
	rec := record(t, st, fs.Path(target))
	var k, tg, dir unix.Stat_t
	must(t, unix.Lstat(fs.Path(keeper), &k))
	must(t, unix.Lstat(fs.Path(target), &tg))
	must(t, unix.Lstat(filepath.Dir(fs.Path(target)), &dir))
	in := Intent{ID: token(), Dir: []byte(filepath.Dir(fs.Path(target))), DirIno: dir.Ino, Name: []byte(filepath.Base(target)),
		Dev: rec.Dev, Keeper: k.Ino, Target: tg.Ino, Was: &Was{Backend: rec.Backend.String(), Digest: rec.Digest,
			Size: tg.Size, TargetMtimeNs: tg.Mtim.Nano(), KeeperMtimeNs: k.Mtim.Nano(), Mode: tg.Mode, UID: tg.Uid, GID: tg.Gid,
			Xattrs: xattrSum(nil), KeeperLinks: k.Nlink + 1}}
	in.Temp = tempPrefix + in.ID
	return in
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestHardlinkWriterArrives: a process that opens the target for writing
// while the bytes are compared waits on the lease, and the pair is
// skipped; the writer's open then goes through.
func TestHardlinkWriterArrives(t *testing.T) {
	data := content(15, 200_000)
	fs, st, d := hardlinkSetup(t, map[string][]byte{"k": data, "t": data})
	must(t, os.Chtimes(fs.Path("k"), aLongTimeAgo, aLongTimeAgo))
	recordAll(t, st, fs, "k", "t")
	sigio := make(chan os.Signal, 1)
	signal.Notify(sigio, syscall.SIGIO)
	defer signal.Stop(sigio)
	opened := make(chan error, 1)
	testHookStep = func(step string) {
		if step != "compared" {
			return
		}
		go func() {
			f, err := os.OpenFile(fs.Path("t"), os.O_WRONLY, 0)
			if err == nil {
				f.Close()
			}
			opened <- err
		}()
		<-sigio // the kernel tells the lease holder that a writer waits
	}
	defer func() { testHookStep = nil }()
	_, res, err := runDedup(t, d, Request{PlanOptions: PlanOptions{Mode: Hardlink}})
	if err != nil || res.Done != 0 || res.Skipped[SkipOpen] != 1 {
		t.Fatalf("done %d, skipped %v, %v; want the pair skipped as open for writing", res.Done, res.Skipped, err)
	}
	if err := <-opened; err != nil {
		t.Errorf("the writer's open: %v", err)
	}
	if lstat(t, fs.Path("t")).Ino == lstat(t, fs.Path("k")).Ino {
		t.Error("t was relinked")
	}
	assertNoTemp(t, fs.Dir)
}

// TestHardlinkSharedFreesNothing: on XFS, hardlink mode still links a copy
// that already shares its keeper's blocks, and the plan and the result say
// that it frees nothing.
func TestHardlinkSharedFreesNothing(t *testing.T) {
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: loopfs.MinSize[loopfs.XFS]})
	st := openStore(t)
	data := content(9, 1<<20)
	writeFile(t, fs.Path("keep"), data)
	writeFile(t, fs.Path("fresh"), data)
	src, err := os.Open(fs.Path("keep"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(fs.Path("clone"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	old := time.Now().Add(-time.Hour) // the keeper is the oldest
	if err := os.Chtimes(fs.Path("keep"), old, old); err != nil {
		t.Fatal(err)
	}
	recordAll(t, st, fs, "keep", "fresh", "clone")
	d := New(st, Options{Intents: NewMetaIntents(st)})
	plan, res, err := runDedup(t, d, Request{PlanOptions: PlanOptions{Mode: Hardlink}})
	if err != nil || res.Done != 2 || len(res.Skips) != 0 {
		t.Fatalf("done %d, skips %v, %v; want both linked", res.Done, res.Skips, err)
	}
	if plan.Actions != 2 || plan.Frees != int64(len(data)) {
		t.Errorf("plan: %d actions freeing %d; want 2 freeing %d, the fresh copy's bytes alone", plan.Actions, plan.Frees, len(data))
	}
	if res.Freed != int64(len(data)) {
		t.Errorf("freed %d, want %d: removing the clone frees nothing", res.Freed, len(data))
	}
	keeper := lstat(t, fs.Path("keep"))
	for _, n := range []string{"fresh", "clone"} {
		assertContent(t, fs.Path(n), data)
		if fi := lstat(t, fs.Path(n)); fi.Ino != keeper.Ino {
			t.Errorf("%s is inode %d, want the keeper's %d", n, fi.Ino, keeper.Ino)
		}
	}
	assertNoTemp(t, fs.Dir)
}
