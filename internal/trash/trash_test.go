package trash

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"/home/u/a b.txt":        "/home/u/a%20b.txt",
		"Photos/été #1%.jpg":     "Photos/%C3%A9t%C3%A9%20%231%25.jpg",
		"x/\n\xff?=&;:@":         "x/%0A%FF%3F%3D%26%3B%3A%40",
		"plain-_.!~*'()/ABC0129": "plain-_.!~*'()/ABC0129",
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestInfoText(t *testing.T) {
	when := time.Date(2026, 3, 4, 5, 6, 7, 800, time.Local)
	top := Bin{Dir: "/mnt/usb/.Trash-1000", Top: "/mnt/usb", UID: 1000}
	home := Bin{Dir: "/home/u/.local/share/Trash", UID: 1000}
	for _, c := range []struct {
		b    Bin
		path string
		want string
	}{
		{top, "/mnt/usb/a dir/f.jpg", "[Trash Info]\nPath=a%20dir/f.jpg\nDeletionDate=2026-03-04T05:06:07\n"},
		{top, "/elsewhere/f", "[Trash Info]\nPath=/elsewhere/f\nDeletionDate=2026-03-04T05:06:07\n"},
		{top, "/mnt/usbx/f", "[Trash Info]\nPath=/mnt/usbx/f\nDeletionDate=2026-03-04T05:06:07\n"},
		{home, "/home/u/Doc/ß.txt", "[Trash Info]\nPath=/home/u/Doc/%C3%9F.txt\nDeletionDate=2026-03-04T05:06:07\n"},
	} {
		text := c.b.Text(c.path, when)
		if string(text) != c.want {
			t.Errorf("Text(%s) = %q, want %q", c.path, text, c.want)
		}
		in, err := c.b.Parse(text)
		if err != nil || in.Path != c.path || !in.Deleted.Equal(when.Truncate(time.Second)) {
			t.Errorf("Parse(Text(%s)) = %+v, %v", c.path, in, err)
		}
	}
	for _, bad := range []string{"", "Path=/x\n", "[Trash Info]\nPath=/x\n", "[Trash Info]\nDeletionDate=2026-03-04T05:06:07\n"} {
		if _, err := top.Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) took it", bad)
		}
	}
}

// newTrash opens a trash in a fresh folder.
func newTrash(t *testing.T) *Opened {
	t.Helper()
	top := t.TempDir()
	o, err := Open(Bin{Dir: filepath.Join(top, ".Trash-0"), Top: top, UID: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	return o
}

// TestNames: a name files/ or info/ holds is taken; the next are
// NAME.2, NAME.3, as file managers name them.
func TestNames(t *testing.T) {
	o := newTrash(t)
	take := func(want string) {
		t.Helper()
		name, err := o.Free("f.jpg")
		if err != nil || name != want {
			t.Fatalf("Free = %q, %v; want %q", name, err, want)
		}
		if err := o.Reserve(name, []byte("[Trash Info]\n")); err != nil {
			t.Fatal(err)
		}
	}
	take("f.jpg")
	take("f.jpg.2")
	// A file in files/ without its info (another program's leftover).
	os.WriteFile(filepath.Join(o.Dir, "files", "f.jpg.3"), nil, 0o600)
	take("f.jpg.4")
	if err := o.Reserve("f.jpg", nil); !errors.Is(err, ErrTaken) {
		t.Errorf("Reserve of a taken name: %v, want ErrTaken", err)
	}
	if err := o.Reserve("f.jpg.3", nil); !errors.Is(err, ErrTaken) {
		t.Errorf("Reserve of a name files/ holds: %v, want ErrTaken", err)
	}
	if _, err := os.Stat(filepath.Join(o.Dir, "info", "f.jpg.3.trashinfo")); !os.IsNotExist(err) {
		t.Errorf("a refused Reserve left its info file: %v", err)
	}
}

// TestMoveAndUnreserve: Move puts the file in files/ and never over
// another; Unreserve removes an info file only without its file.
func TestMoveAndUnreserve(t *testing.T) {
	o := newTrash(t)
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "a"), []byte("A"), 0o600)
	os.WriteFile(filepath.Join(src, "b"), []byte("B"), 0o600)
	d, _ := os.Open(src)
	defer d.Close()
	if err := o.Reserve("a", []byte("[Trash Info]\n")); err != nil {
		t.Fatal(err)
	}
	if err := o.Move(int(d.Fd()), "a", "a"); err != nil {
		t.Fatal(err)
	}
	if err := o.Move(int(d.Fd()), "b", "a"); !errors.Is(err, unix.EEXIST) {
		t.Errorf("Move over a trashed file: %v, want EEXIST", err)
	}
	if b, _ := os.ReadFile(filepath.Join(o.Dir, "files", "a")); string(b) != "A" {
		t.Errorf("files/a holds %q", b)
	}
	var st unix.Stat_t
	unix.Stat(filepath.Join(o.Dir, "files", "a"), &st)
	if !o.Holds("a", st.Ino) || o.Holds("b", st.Ino) {
		t.Error("Holds is wrong")
	}
	o.Unreserve("a") // its file is there: kept
	if _, err := os.Stat(filepath.Join(o.Dir, "info", "a.trashinfo")); err != nil {
		t.Errorf("Unreserve removed the info of a trashed file: %v", err)
	}
	o.Reserve("b", []byte("[Trash Info]\n"))
	if err := o.Unreserve("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(o.Dir, "info", "b.trashinfo")); !os.IsNotExist(err) {
		t.Errorf("Unreserve left the info of a file never moved: %v", err)
	}
}

// TestFind picks the trash of a real ext4 mount: the home trash when the
// data home is there and the user's, $topdir/.Trash/$uid when .Trash is
// sticky, else $topdir/.Trash-$uid; a symlinked trash is refused.
func TestFind(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 32 << 20})
	file := fs.Path("photos", "deep", "f.jpg")
	os.MkdirAll(filepath.Dir(file), 0o755)
	os.WriteFile(file, []byte("x"), 0o644)
	var st unix.Stat_t
	unix.Stat(file, &st)
	dev := uint64(st.Dev)
	if top, err := Topdir(file, dev); err != nil || top != fs.Dir {
		t.Fatalf("Topdir = %q, %v; want %q", top, err, fs.Dir)
	}
	find := func(uid int, dataHome, want string) Bin {
		t.Helper()
		b, err := Find(file, dev, uid, dataHome)
		if err != nil || b.Dir != want {
			t.Fatalf("Find(uid %d, %q) = %+v, %v; want %s", uid, dataHome, b, err, want)
		}
		return b
	}
	find(1000, "", fs.Path(".Trash-1000"))
	find(0, "/root/.local/share", fs.Path(".Trash-0")) // the data home is elsewhere
	home := fs.Path("home", ".local", "share")
	os.MkdirAll(home, 0o700)
	if b := find(0, home, filepath.Join(home, "Trash")); b.Top != "" {
		t.Errorf("the home trash has Top %q", b.Top)
	}
	find(1000, home, fs.Path(".Trash-1000")) // not the user's data home
	os.Mkdir(fs.Path(".Trash"), 0o777)
	find(1000, "", fs.Path(".Trash-1000")) // not sticky
	os.Chmod(fs.Path(".Trash"), 0o777|os.ModeSticky)
	b := find(1000, "", fs.Path(".Trash", "1000"))
	o, err := Open(b)
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	for _, sub := range []string{"", "files", "info"} {
		var ds unix.Stat_t
		unix.Lstat(filepath.Join(b.Dir, sub), &ds)
		if ds.Uid != 1000 || ds.Mode&0o777 != 0o700 {
			t.Errorf("%s: uid %d mode %o, want 1000 0700", filepath.Join(b.Dir, sub), ds.Uid, ds.Mode&0o777)
		}
	}
	// A $topdir/.Trash/$uid that is a symlink falls back to .Trash-$uid.
	os.Symlink("/etc", fs.Path(".Trash", "1003"))
	o, err = Open(find(1003, "", fs.Path(".Trash", "1003")))
	if err != nil || o.Dir != fs.Path(".Trash-1003") || o.Top != fs.Dir {
		t.Fatalf("Open of a symlinked .Trash/1003: %+v, %v; want .Trash-1003", o, err)
	}
	o.Close()
	// Another user's folder, or a symlink, at .Trash-$uid is never used.
	os.Symlink("/etc", fs.Path(".Trash-1001"))
	if _, err := Open(Bin{Dir: fs.Path(".Trash-1001"), Top: fs.Dir, UID: 1001}); !errors.Is(err, ErrNoTrash) {
		t.Errorf("Open of a symlinked trash: %v, want ErrNoTrash", err)
	}
	os.Mkdir(fs.Path(".Trash-1002"), 0o700)
	if _, err := Open(Bin{Dir: fs.Path(".Trash-1002"), Top: fs.Dir, UID: 1002}); err == nil || !strings.Contains(err.Error(), "not owned") {
		t.Errorf("Open of root's folder as uid 1002's trash: %v", err)
	}
}

// Usable names only a trash a move can use: a trash folder (or its
// files/) that is a symlink, or another user's, is refused, as Open
// refuses it; a missing one is usable (Open makes it).
func TestUsable(t *testing.T) {
	top := t.TempDir()
	uid := os.Getuid()
	b := Bin{Dir: filepath.Join(top, ".Trash-"+strconv.Itoa(uid)), Top: top, UID: uid}
	if got, err := Usable(b); err != nil || got.Dir != b.Dir {
		t.Fatalf("missing trash: %+v, %v; want usable", got, err)
	}
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, b.Dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Usable(b); !errors.Is(err, ErrNoTrash) {
		t.Errorf("a symlinked trash folder: %v; want ErrNoTrash", err)
	}
	if err := os.Remove(b.Dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(b.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(b.Dir, "files")); err != nil {
		t.Fatal(err)
	}
	if _, err := Usable(b); !errors.Is(err, ErrNoTrash) {
		t.Errorf("a symlinked files/: %v; want ErrNoTrash", err)
	}
	if err := os.Remove(filepath.Join(b.Dir, "files")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(b.Dir, uid+1, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := Usable(b); !errors.Is(err, ErrNoTrash) {
		t.Errorf("another user's trash folder: %v; want ErrNoTrash", err)
	}
}
