package heal

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/audit"
	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/store"
)

// A file found corrupt is restored from a verified copy on the same file
// system: the name holds the recorded bytes again, with the rotten file's
// owner, mode, mtime, xattrs and ACL; the rotten bytes are kept aside; the
// finding is lifted and the heal is in the audit's history. On XFS with
// reflink the restored file shares the copy's blocks; without (ext4, XFS
// reflink=0) it is a copy. A dry run first says what it would do and
// touches nothing.
func TestHealLocal(t *testing.T) {
	for _, c := range []struct {
		name    string
		kind    loopfs.Kind
		mkfs    []string
		reflink bool
	}{
		{"ext4", loopfs.Ext4, nil, false},
		{"xfs-reflink", loopfs.XFS, []string{"-m", "reflink=1"}, true},
		{"xfs-noreflink", loopfs.XFS, []string{"-m", "reflink=0"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.kind, c.mkfs...)
			data := content(200 << 10)
			victim := e.write("photo.jpg", data)
			copyPath := e.write("backup.jpg", data)
			if err := unix.Setxattr(victim, "user.tag", []byte("holiday"), 0); err != nil {
				t.Fatal(err)
			}
			if err := unix.Setxattr(victim, "system.posix_acl_access", aclXattr(), 0); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(victim, 1234, 5678); err != nil {
				t.Fatal(err)
			}
			old := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
			if err := os.Chtimes(victim, old, old); err != nil {
				t.Fatal(err)
			}
			e.start(Options{})
			e.rot(victim)
			before, _ := fsstat.Lstat(victim)
			rotten, _ := os.ReadFile(victim)

			plan := e.healAll(true)
			if f := plan[victim]; f.Outcome != WouldHeal || string(f.Source) != copyPath {
				t.Fatalf("dry run: %+v", f)
			}
			if now, _ := fsstat.Lstat(victim); !now.Same(before) {
				t.Fatal("a dry run touched the file")
			}

			f := e.healAll(false)[victim]
			if f.Outcome != Healed || string(f.Source) != copyPath || f.Aside == "" {
				t.Fatalf("heal: %+v\nlog:\n%s", f, e.log)
			}
			mustHold(t, victim, data)
			mustHold(t, f.Aside, rotten)
			var st unix.Stat_t
			if err := unix.Lstat(victim, &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != 1234 || st.Gid != 5678 || st.Mode&0o7777 != 0o640 || st.Mtim.Nano() != old.UnixNano() {
				t.Fatalf("owner %d:%d mode %o mtime %d, want 1234:5678 640 %d", st.Uid, st.Gid, st.Mode&0o7777, st.Mtim.Nano(), old.UnixNano())
			}
			if v, _ := getXattr(victim, "user.tag"); string(v) != "holiday" {
				t.Fatalf("user.tag = %q", v)
			}
			if v, _ := getXattr(victim, "system.posix_acl_access"); !bytes.Equal(v, aclXattr()) {
				t.Fatalf("ACL = %x, want %x", v, aclXattr())
			}
			if len(e.problems()) != 0 {
				t.Fatalf("the finding stands: %+v", e.problems())
			}
			rec, _, _ := e.st.Get([]byte(victim))
			if rec.State != store.StateOK || rec.Ino != st.Ino {
				t.Fatalf("record after the heal: %+v", rec)
			}
			var heals []audit.HealRecord
			_ = e.a.Heals(context.Background(), func(h audit.HealRecord) error { heals = append(heals, h); return nil })
			if len(heals) != 1 || string(heals[0].Path) != victim || heals[0].Aside != f.Aside || heals[0].Source != copyPath {
				t.Fatalf("history: %+v", heals)
			}
			if got := temps(t, e.root); len(got) != 0 {
				t.Fatalf("temporary files left: %v", got)
			}
			vp, _ := loopfs.Physical(t, victim)
			cp, _ := loopfs.Physical(t, copyPath)
			if shared := vp == cp; shared != c.reflink {
				t.Fatalf("restored file shares the copy's blocks: %v, want %v", shared, c.reflink)
			}
			// An accept removes the rotten bytes kept aside.
			res, err := e.a.Accept(context.Background(), []byte(victim))
			if err != nil || len(res.Released) != 1 {
				t.Fatalf("accept: %+v %v", res, err)
			}
			if _, err := os.Lstat(f.Aside); !os.IsNotExist(err) {
				t.Fatalf("the rotten bytes are still aside after an accept: %v", err)
			}
		})
	}
}

// A reflinked twin (sharing blocks with the rotten file) carries the rot:
// it is no copy, even where its own bytes read right (the rot is in a
// block it does not share). With only it, the file is reported without a
// verified copy and left alone.
func TestHealRefusesTwins(t *testing.T) {
	e := newEnv(t, loopfs.XFS)
	data := content(256 << 10)
	victim := e.write("a.bin", data)
	twin := e.path("twin.bin")
	// The twin shares the victim's first half (FICLONERANGE) and has its
	// own second half: rot in the victim's second half leaves the twin's
	// bytes right.
	src, err := os.Open(victim)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(twin, os.O_CREATE|os.O_WRONLY, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlFileCloneRange(int(dst.Fd()), &unix.FileCloneRange{Src_fd: int64(src.Fd()), Src_length: 128 << 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.WriteAt(data[128<<10:], 128<<10); err != nil {
		t.Fatal(err)
	}
	dst.Sync()
	dst.Close()
	src.Close()
	old := time.Now().Add(-time.Hour)
	os.Chtimes(twin, old, old)
	e.start(Options{})
	e.fs.Sync(t)
	e.fs.FlipByte(t, victim, 200<<10) // the victim's own half
	e.audit()
	if p := e.problems()[victim]; p.Class != audit.Corrupt {
		t.Fatalf("not corrupt: %+v", e.problems())
	}
	mustHold(t, twin, data) // the twin's bytes are right

	fh := e.healAll(false)[victim]
	if fh.Outcome != NoCopy || !strings.Contains(fh.Reason, "0 of 0 copies healthy") || !strings.Contains(fh.Reason, "1 name shares") {
		t.Fatalf("heal with only a twin: %+v\nlog:\n%s", fh, e.log)
	}
	if got, _ := os.ReadFile(victim); bytes.Equal(got, data) {
		t.Fatal("the victim was restored from a twin")
	}
}

// A rotten file with two names (hard links) is not healed: a new inode
// at one name would split them, the other keeping the rot. A healthy
// copy exists; the file is left alone.
func TestHealRefusesHardLinked(t *testing.T) {
	e := newEnv(t, loopfs.Ext4)
	data := content(64 << 10)
	victim := e.write("a.bin", data)
	e.write("b.bin", data)
	if err := os.Link(victim, e.path("link.bin")); err != nil {
		t.Fatal(err)
	}
	e.start(Options{})
	e.rot(victim)
	before, _ := fsstat.Lstat(victim)
	out := e.healAll(false)
	for _, p := range []string{victim, e.path("link.bin")} {
		if f := out[p]; f.Outcome != Refused || !strings.Contains(f.Reason, "2 names") {
			t.Fatalf("%s: %+v", p, f)
		}
	}
	if now, _ := fsstat.Lstat(victim); now.Ino != before.Ino {
		t.Fatal("a hard-linked file was replaced")
	}
}

// With two copies both rotten too, nothing is used and the report says
// how many copies were healthy.
func TestHealNoHealthyCopy(t *testing.T) {
	e := newEnv(t, loopfs.Ext4)
	data := content(64 << 10)
	victim := e.write("a.bin", data)
	b := e.write("b.bin", data)
	c := e.write("c.bin", data)
	e.start(Options{})
	e.rot(victim)
	e.fs.FlipByte(t, b, 7)
	e.fs.FlipByte(t, c, 9)
	f := e.healAll(false)[victim]
	if f.Outcome != NoCopy || !strings.HasPrefix(f.Reason, "no verified copy: 0 of 2 copies healthy") {
		t.Fatalf("%+v", f)
	}
	if len(e.problems()) == 0 {
		t.Fatal("the finding was lifted")
	}
}

// An edit between the finding and the heal: before the heal starts, and
// between the copy being verified and the swap. Neither is healed; the
// edit stays and no temporary file is left.
func TestHealEditedMeanwhile(t *testing.T) {
	e := newEnv(t, loopfs.Ext4)
	data := content(64 << 10)
	early := e.write("early.bin", data)
	late := e.write("late.bin", append([]byte{}, data...))
	e.write("copy.bin", data)
	e.start(Options{})
	e.rot(early, late)
	edit := []byte("the user's edit")
	if err := os.WriteFile(early, edit, 0o640); err != nil {
		t.Fatal(err)
	}
	testHook = func(step, temp string) {
		if step == "verified" {
			if err := os.WriteFile(late, edit, 0o640); err != nil {
				t.Error(err)
			}
		}
	}
	defer func() { testHook = nil }()
	out := e.healAll(false)
	for _, p := range []string{early, late} {
		if out[p].Outcome != Changed {
			t.Fatalf("%s: %+v", p, out[p])
		}
		mustHold(t, p, edit)
	}
	if got := temps(t, e.root); len(got) != 0 {
		t.Fatalf("temporary files left: %v", got)
	}
}

// A copy that rots between being chosen (verified) and being used: the
// bytes written in place do not verify, so it is not used; the next
// copy heals the file.
func TestHealCopyRotsAfterChosen(t *testing.T) {
	for _, kind := range []loopfs.Kind{loopfs.Ext4, loopfs.XFS} {
		t.Run(string(kind), func(t *testing.T) {
			e := newEnv(t, kind)
			data := content(64 << 10)
			victim := e.write("a.bin", data)
			b := e.write("b.bin", data)
			c := e.write("c.bin", data)
			e.start(Options{})
			e.rot(victim)
			var first string
			rotted := false
			testHook = func(step, temp string) {
				if step == "chosen" && !rotted {
					rotted = true
					e.fs.FlipByte(t, temp, 11)
					first = temp
				}
			}
			defer func() { testHook = nil }()
			f := e.healAll(false)[victim]
			other := map[string]string{b: c, c: b}[first]
			if f.Outcome != Healed || string(f.Source) != other {
				t.Fatalf("%+v (rotted %s)\nlog:\n%s", f, first, e.log)
			}
			mustHold(t, victim, data)
		})
	}
}

// A file rewritten with its mtime set back while nothing watched changed
// without a trace: the new bytes may be the user's. Heal leaves it, even
// where no audit heard the indexer's finding (no finding was filed: the
// audit was off, or a crash came first) and the audit, reading the file
// later under the ctime the finding took, sees nothing but other bytes:
// the record says untraced, and that class stands.
func TestHealRefusesUntraced(t *testing.T) {
	e := newEnv(t, loopfs.Ext4)
	data := content(64 << 10)
	victim := e.write("a.bin", data)
	e.write("copy.bin", data)
	e.start(Options{})
	edit := content(64 << 10)
	before, err := os.Stat(victim)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(victim, edit, 0o640); err != nil {
		t.Fatal(err)
	}
	// The mtime set back to the very one it had (not "an hour ago" again,
	// which is another second when the start took longer than one).
	if err := os.Chtimes(victim, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	e.ix.Rehash(victim)
	e.settle()
	if rec, _, _ := e.st.Get([]byte(victim)); rec.State != store.StateUntraced {
		t.Fatalf("record after the untraced rewrite: %v, want untraced\nlog:\n%s", rec.State, e.log)
	}
	e.audit()
	if p := e.problems()[victim]; p.Class != audit.Untraced {
		t.Fatalf("the audit found %v, want untraced\nlog:\n%s", p.Class, e.log)
	}
	f := e.healAll(false)[victim]
	if f.Outcome != Refused {
		t.Fatalf("heal of an untraced file: %+v", f)
	}
	mustHold(t, victim, edit)
}

// The rotten file's folder is moved during the heal, or moved out of the
// tree and a symlink left in its place: the heal writes nothing through
// the old name or the symlink, says the file changed, and leaves no
// temporary file in the folder, wherever it went.
func TestHealFolderMovedMeanwhile(t *testing.T) {
	for _, symlink := range []bool{false, true} {
		t.Run(map[bool]string{false: "renamed", true: "symlinked"}[symlink], func(t *testing.T) {
			e := newEnv(t, loopfs.Ext4)
			if err := os.Mkdir(e.path("d"), 0o755); err != nil {
				t.Fatal(err)
			}
			data := content(64 << 10)
			victim := e.write("d/a.bin", data)
			e.write("copy.bin", data)
			e.start(Options{})
			e.rot(victim)
			rotten, _ := os.ReadFile(victim)
			moved := filepath.Join(e.fs.Dir, "moved") // outside the tree
			testHook = func(step, temp string) {
				if step != "filled" {
					return
				}
				if err := os.Rename(e.path("d"), moved); err != nil {
					t.Error(err)
				}
				if symlink {
					if err := os.Symlink(moved, e.path("d")); err != nil {
						t.Error(err)
					}
				}
			}
			defer func() { testHook = nil }()
			f := e.healAll(false)[victim]
			if f.Outcome != Changed {
				t.Errorf("%+v\nlog:\n%s", f, e.log)
			}
			mustHold(t, filepath.Join(moved, "a.bin"), rotten)
			ents, _ := os.ReadDir(moved)
			for _, en := range ents {
				if strings.HasPrefix(en.Name(), TempPrefix) {
					t.Errorf("left in the moved folder: %s", en.Name())
				}
			}
		})
	}
}

// A flagged file whose disk is away (unmounted, unplugged) is away, not
// changed: nothing is touched, the finding stays, and the file heals
// once the disk is back.
func TestHealFileSystemAway(t *testing.T) {
	e := newEnv(t, loopfs.Ext4)
	data := content(64 << 10)
	victim := e.write("a.bin", data)
	e.write("b.bin", data)
	e.start(Options{})
	e.rot(victim)
	e.fs.Unmount(t)
	for _, dry := range []bool{true, false} {
		if f := e.healAll(dry)[victim]; f.Outcome != Away || !strings.Contains(f.Reason, "not mounted") {
			t.Fatalf("dry run %v with the disk away: %+v; want away", dry, f)
		}
	}
	if len(e.problems()) != 1 {
		t.Fatalf("the finding went with the disk: %v", e.problems())
	}
	e.fs.Mount(t)
	e.settle()
	if f := e.healAll(false)[victim]; f.Outcome != Healed {
		t.Fatalf("with the disk back: %+v; want healed", f)
	}
	mustHold(t, victim, data)
}
