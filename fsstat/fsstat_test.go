package fsstat

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestLstatKinds(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "l")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "p")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path    string
		regular bool
		want    os.FileMode
	}{
		{file, true, 0},
		{link, false, os.ModeSymlink},
		{fifo, false, os.ModeNamedPipe},
		{dir, false, os.ModeDir},
	}
	for _, c := range cases {
		fi, err := Lstat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.IsRegular() != c.regular || fi.Mode.Type() != c.want {
			t.Errorf("%s: mode %v, regular %v; want type %v regular %v", c.path, fi.Mode, fi.IsRegular(), c.want, c.regular)
		}
	}
	fi, _ := Lstat(file)
	if fi.Size != 5 || fi.Mode.Perm() != 0o640 {
		t.Errorf("file: size %d perm %v", fi.Size, fi.Mode.Perm())
	}
	ref, _ := os.Lstat(file)
	if fi.MtimeNs != ref.ModTime().UnixNano() {
		t.Errorf("mtime %d, os.Lstat says %d", fi.MtimeNs, ref.ModTime().UnixNano())
	}
}

func TestSameDetectsChange(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, _ := Lstat(file)
	b, _ := Lstat(file)
	if !a.Same(b) {
		t.Fatal("two stats of an untouched file differ")
	}
	later := time.Unix(0, a.MtimeNs).Add(time.Second)
	if err := os.Chtimes(file, later, later); err != nil {
		t.Fatal(err)
	}
	c, _ := Lstat(file)
	if a.Same(c) {
		t.Fatal("mtime change not seen")
	}
	if _, err := Lstat(filepath.Join(t.TempDir(), "missing")); !os.IsNotExist(err) {
		t.Fatalf("missing file: %v", err)
	}
}

// Only S_IFREG is a regular file; an unknown type is irregular, not regular.
func TestFromStatTypes(t *testing.T) {
	for _, c := range []struct {
		ifmt    uint32
		regular bool
	}{
		{unix.S_IFREG, true}, {unix.S_IFDIR, false}, {unix.S_IFLNK, false}, {unix.S_IFIFO, false},
		{unix.S_IFSOCK, false}, {unix.S_IFCHR, false}, {unix.S_IFBLK, false}, {0, false}, {0o160000, false},
	} {
		fi := FromStat(&unix.Stat_t{Mode: c.ifmt | 0o644})
		if fi.IsRegular() != c.regular || fi.Mode.Perm() != 0o644 {
			t.Errorf("st_mode %#o: mode %v, regular %v; want regular %v", c.ifmt|0o644, fi.Mode, fi.IsRegular(), c.regular)
		}
	}
}
