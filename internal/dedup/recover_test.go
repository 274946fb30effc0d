package dedup

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/store"
)

// killedAt runs a hardlink deduplication of root (files "k", the keeper,
// and "sub/t", its copy) in a child process that kills itself right after
// the first time it reaches step, and returns the copy's and the keeper's
// inodes from before.
func killedAt(t *testing.T, fs *loopfs.FS, step string, data []byte) (index string, tIno, kIno uint64) {
	t.Helper()
	root := fs.Path("root")
	files := map[string][]byte{"k": data, "sub/t": data}
	for name, b := range files {
		writeFile(t, filepath.Join(root, name), b)
	}
	must(t, os.Chtimes(filepath.Join(root, "k"), aLongTimeAgo, aLongTimeAgo))
	index = filepath.Join(t.TempDir(), "index.db")
	recordClosed(t, index, root, files)
	tIno, kIno = lstat(t, filepath.Join(root, "sub/t")).Ino, lstat(t, filepath.Join(root, "k")).Ino
	killChild(t, index, root, step+":1", 0, 0)
	return index, tIno, kIno
}

// recoverIndex opens the index and recovers, as the daemon does at start.
func recoverIndex(t *testing.T, index string) error {
	t.Helper()
	var err error
	withStore(t, index, func(st *store.Store) {
		err = New(st, Options{Intents: NewMetaIntents(st)}).Recover(context.Background())
		assertNoIntents(t, st)
	})
	return err
}

// TestRecoverAfterKill: the daemon is killed right after the exchange,
// and before it starts again the files are used: written through the
// name (which shows the keeper), through a handle on the old copy taken
// before the exchange, or both; replaced; removed. Recovery keeps every
// write at the name it was made through, and keeps both files when both
// were written. Before, it exchanged the names back whenever the bytes
// differed: the user's edit of the copy then sat in the keeper, and the
// copy showed the old bytes again.
func TestRecoverAfterKill(t *testing.T) {
	data := content(41, 200_000)
	edit, late := []byte("the user's edit\n"), []byte("a late write to the old copy\n")
	withEnd := func(b ...[]byte) []byte { return append(append([]byte{}, data...), joined(b)...) }
	for _, c := range []struct {
		name  string
		after func(t *testing.T, root string, h *handle)
		check func(t *testing.T, root string, tIno, kIno uint64)
	}{
		{"the copy is appended to through its name", func(t *testing.T, root string, h *handle) {
			must(t, appendTo(filepath.Join(root, "sub/t"), edit))
		}, func(t *testing.T, root string, tIno, kIno uint64) {
			assertContent(t, filepath.Join(root, "sub/t"), withEnd(edit))
			if lstat(t, filepath.Join(root, "sub/t")).Ino != kIno {
				t.Error("the copy's name no longer shows the file the edit was written to")
			}
		}},
		{"the old copy is written through a handle from before the exchange", func(t *testing.T, root string, h *handle) {
			must(t, appendTo(h.path(), late))
		}, func(t *testing.T, root string, tIno, kIno uint64) {
			assertContent(t, filepath.Join(root, "sub/t"), withEnd(late))
			assertContent(t, filepath.Join(root, "k"), data)
			if lstat(t, filepath.Join(root, "sub/t")).Ino != tIno {
				t.Error("the copy's name does not show the old copy, which was written")
			}
		}},
		{"both are written", func(t *testing.T, root string, h *handle) {
			must(t, appendTo(h.path(), late))
			must(t, appendTo(filepath.Join(root, "sub/t"), edit))
		}, func(t *testing.T, root string, tIno, kIno uint64) {
			assertContent(t, filepath.Join(root, "sub/t"), withEnd(edit))
			kept := keptNames(t, root)
			if len(kept) != 1 {
				t.Fatalf("old copies kept: %v, want the written one", kept)
			}
			assertContent(t, kept[0], withEnd(late))
		}},
		{"the copy is replaced", func(t *testing.T, root string, h *handle) {
			writeFile(t, filepath.Join(root, "sub/t.new"), []byte("new"))
			must(t, os.Rename(filepath.Join(root, "sub/t.new"), filepath.Join(root, "sub/t")))
		}, func(t *testing.T, root string, tIno, kIno uint64) {
			assertContent(t, filepath.Join(root, "sub/t"), []byte("new"))
		}},
		{"the copy is removed", func(t *testing.T, root string, h *handle) {
			must(t, os.Remove(filepath.Join(root, "sub/t")))
		}, func(t *testing.T, root string, tIno, kIno uint64) {
			if _, err := os.Lstat(filepath.Join(root, "sub/t")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the removed copy is back: %v", err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
			root := fs.Path("root")
			writeFile(t, filepath.Join(root, "sub/t"), data) // for the handle; killedAt writes it again
			h := &handle{t: t}
			h.take(filepath.Join(root, "sub/t"))
			index, tIno, kIno := killedAt(t, fs, "exchanged", data)
			var hs unix.Stat_t
			if err := unix.Stat(h.path(), &hs); err != nil || hs.Ino != tIno {
				t.Fatalf("the handle is not on the copy: %v", err)
			}
			c.after(t, root, h)
			if err := recoverIndex(t, index); err != nil {
				t.Errorf("Recover: %v", err)
			}
			c.check(t, root, tIno, kIno)
			if !strings.Contains(c.name, "both") {
				if kept := keptNames(t, root); len(kept) > 0 {
					t.Errorf("old copies kept: %v", kept)
				}
			}
			assertNoTemp(t, fs.Dir)
		})
	}
}

// keptNames lists the old copies kept under dir, by their visible name:
// the copy's name, ".annexd-kept-" and part of the step's id.
func keptNames(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.Contains(e.Name(), ".annexd-kept-") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func joined(bs [][]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// TestRecoverFindsTheFolder: the daemon is killed in a step, and while it
// is down the copy's folder is renamed (and maybe another made at its
// path), or the file system comes back on another device number.
// Recovery finds the step's temporary name all the same and settles it.
// Before, it dropped the intent and left the temporary name behind, or
// took the old copy for a stranger's file.
func TestRecoverFindsTheFolder(t *testing.T) {
	data := content(42, 100_000)
	for _, c := range []struct {
		name   string
		step   string
		change func(t *testing.T, fs *loopfs.FS)
		copyAt string // where the copy's name is afterwards
		linked bool   // whether it shows the keeper then
	}{
		{"renamed after the link", "linked", func(t *testing.T, fs *loopfs.FS) {
			must(t, os.Rename(fs.Path("root/sub"), fs.Path("root/moved")))
		}, "root/moved/t", false},
		{"renamed after the exchange", "exchanged", func(t *testing.T, fs *loopfs.FS) {
			must(t, os.Rename(fs.Path("root/sub"), fs.Path("root/moved")))
		}, "root/moved/t", true},
		{"renamed, and another folder made at its path", "exchanged", func(t *testing.T, fs *loopfs.FS) {
			must(t, os.Rename(fs.Path("root/sub"), fs.Path("root/moved")))
			writeFile(t, fs.Path("root/sub/t"), []byte("another file"))
		}, "root/moved/t", true},
		{"on another device number, after the link", "linked", remountElsewhere, "root/sub/t", false},
		{"on another device number, after the exchange", "exchanged", remountElsewhere, "root/sub/t", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
			index, tIno, kIno := killedAt(t, fs, c.step, data)
			c.change(t, fs)
			if err := recoverIndex(t, index); err != nil {
				t.Errorf("Recover: %v", err)
			}
			assertNoTemp(t, fs.Dir)
			assertContent(t, fs.Path(c.copyAt), data)
			assertContent(t, fs.Path("root/k"), data)
			want := tIno
			if c.linked {
				want = kIno
			}
			if got := lstat(t, fs.Path(c.copyAt)).Ino; got != want {
				t.Errorf("%s is inode %d, want %d (linked: %v)", c.copyAt, got, want, c.linked)
			}
			if strings.Contains(c.name, "another folder") {
				assertContent(t, fs.Path("root/sub/t"), []byte("another file"))
			}
		})
	}
}

// remountElsewhere unmounts fs and mounts its image again through another
// loop device, so its files show another st_dev, as after a reboot that
// numbered the devices otherwise.
func remountElsewhere(t *testing.T, fs *loopfs.FS) {
	t.Helper()
	var before, after unix.Stat_t
	must(t, unix.Stat(fs.Dir, &before))
	fs.Unmount(t)
	out, err := exec.Command("losetup", "--find", "--show", fs.Image).Output()
	if err != nil {
		t.Fatalf("losetup --find --show %s: %v (losetup is in the mount package)", fs.Image, err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if err := unix.Unmount(fs.Dir, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			t.Errorf("unmount %s: %v", fs.Dir, err)
		}
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v %s", dev, err, out)
		}
	})
	must(t, unix.Mount(dev, fs.Dir, string(fs.Kind), 0, ""))
	must(t, unix.Stat(fs.Dir, &after))
	if after.Dev == before.Dev {
		t.Fatalf("the file system kept its device number %d on %s", after.Dev, dev)
	}
}
