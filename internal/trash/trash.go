package trash

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Bin is the trash a file goes to.
type Bin struct {
	Dir string // the trash folder, holding files/ and info/
	// Top is the folder Path= is relative to: $topdir for the trashes of
	// a mount, "" for the home trash, whose paths are absolute.
	Top string
	UID int // whose trash it is
}

// ErrNoTrash: the file's file system has no trash the user may use.
var ErrNoTrash = errors.New("trash: no usable trash folder")

// Find says which trash the file at path (absolute, on device dev) goes
// to for user uid, whose data home ($XDG_DATA_HOME) is dataHome, or "".
// It makes nothing.
func Find(path string, dev uint64, uid int, dataHome string) (Bin, error) {
	if dataHome != "" && ownedOn(dataHome, dev, uid) {
		return Bin{Dir: filepath.Join(dataHome, "Trash"), UID: uid}, nil
	}
	top, err := Topdir(path, dev)
	if err != nil {
		return Bin{}, err
	}
	id := strconv.Itoa(uid)
	if sharedTrash(filepath.Join(top, ".Trash")) {
		return Bin{Dir: filepath.Join(top, ".Trash", id), Top: top, UID: uid}, nil
	}
	return Bin{Dir: filepath.Join(top, ".Trash-"+id), Top: top, UID: uid}, nil
}

// ownedOn reports whether dir is a folder (not a symlink) on device dev
// owned by uid.
func ownedOn(dir string, dev uint64, uid int) bool {
	var st unix.Stat_t
	return unix.Lstat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR &&
		uint64(st.Dev) == dev && int(st.Uid) == uid
}

// sharedTrash reports whether dir is a $topdir/.Trash the specification
// lets users keep their trashes in: a folder, not a symlink, sticky.
func sharedTrash(dir string) bool {
	var st unix.Stat_t
	return unix.Lstat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&unix.S_ISVTX != 0
}

// Topdir is the mount point of the file system (device dev) holding the
// absolute path: the highest folder above it on the same device.
func Topdir(path string, dev uint64) (string, error) {
	dir := filepath.Dir(path)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil || uint64(st.Dev) != dev {
		return "", fmt.Errorf("%w: %s is not on the file's file system", ErrNoTrash, dir)
	}
	for dir != "/" {
		up := filepath.Dir(dir)
		if unix.Stat(up, &st) != nil || uint64(st.Dev) != dev {
			break
		}
		dir = up
	}
	return dir, nil
}

// fallback is the trash to use when Dir cannot be: $topdir/.Trash-$uid
// for $topdir/.Trash/$uid, none otherwise.
func (b Bin) fallback() (Bin, bool) {
	if b.Top == "" || filepath.Base(filepath.Dir(b.Dir)) != ".Trash" {
		return Bin{}, false
	}
	return Bin{Dir: filepath.Join(b.Top, ".Trash-"+strconv.Itoa(b.UID)), Top: b.Top, UID: b.UID}, true
}

// Usable returns the trash Open would take for b (b, or its fallback),
// without making anything: each of its folders that exists must be a
// folder owned by the user, not a symlink. A plan shown before a run
// names only a trash the run can use.
func Usable(b Bin) (Bin, error) {
	err := usable(b)
	if err == nil {
		return b, nil
	}
	if fb, ok := b.fallback(); ok && usable(fb) == nil {
		return fb, nil
	}
	return Bin{}, err
}

// usable checks the folders of b that exist; the missing ones are made
// when the trash is opened.
func usable(b Bin) error {
	for _, d := range []string{b.Dir, filepath.Join(b.Dir, "files"), filepath.Join(b.Dir, "info")} {
		var st unix.Stat_t
		err := unix.Lstat(d, &st)
		switch {
		case errors.Is(err, unix.ENOENT):
		case err != nil:
			return fmt.Errorf("%w: %v", ErrNoTrash, err)
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return fmt.Errorf("%w: %s is not a folder (a symlink is not allowed)", ErrNoTrash, d)
		case int(st.Uid) != b.UID:
			return fmt.Errorf("%w: %s is not owned by uid %d", ErrNoTrash, d, b.UID)
		}
	}
	return nil
}

// Opened is a trash with its files/ and info/ folders open.
type Opened struct {
	Bin
	files, info *os.File
}

// Open makes the trash's folders where missing and opens them. Each
// must be a folder owned by the user, reached without a symlink; a
// $topdir/.Trash/$uid that cannot be used falls back to .Trash-$uid.
func Open(b Bin) (*Opened, error) {
	o, err := open(b)
	if err != nil {
		if fb, ok := b.fallback(); ok {
			return open(fb)
		}
	}
	return o, err
}

func open(b Bin) (*Opened, error) {
	dir, err := makeDirs(b.Dir, b.UID)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	files, err := subdir(dir, b.Dir, "files", b.UID)
	if err != nil {
		return nil, err
	}
	info, err := subdir(dir, b.Dir, "info", b.UID)
	if err != nil {
		files.Close()
		return nil, err
	}
	return &Opened{Bin: b, files: files, info: info}, nil
}

// makeDirs opens the trash folder, making it and, for the home trash,
// the data home's missing part as the user's own. The folder above the
// trash folder must exist (the data home, $topdir or $topdir/.Trash).
func makeDirs(dir string, uid int) (*os.File, error) {
	parent, err := os.Open(filepath.Dir(dir))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTrash, err)
	}
	defer parent.Close()
	return subdir(parent, filepath.Dir(dir), filepath.Base(dir), uid)
}

// subdir opens the folder name in parent, making it 0700 and the user's
// when missing; it must not be a symlink and must be the user's.
func subdir(parent *os.File, parentPath, name string, uid int) (*os.File, error) {
	path := filepath.Join(parentPath, name)
	pfd := int(parent.Fd())
	err := unix.Mkdirat(pfd, name, 0o700)
	made := err == nil
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("%w: mkdir %s: %v", ErrNoTrash, path, err)
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (a symlink is not allowed)", ErrNoTrash, path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if made {
		if err := unix.Fchown(fd, uid, -1); err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: chown %s: %v", ErrNoTrash, path, err)
		}
		unix.Fsync(pfd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || int(st.Uid) != uid {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not owned by uid %d", ErrNoTrash, path, uid)
	}
	return f, nil
}

// Close closes the trash's folders.
func (o *Opened) Close() {
	o.files.Close()
	o.info.Close()
}
