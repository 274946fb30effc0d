package trash

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/durable"
)

// dateLayout is DeletionDate's format: local time, no zone.
const dateLayout = "2006-01-02T15:04:05"

// Info is what a .trashinfo file says.
type Info struct {
	Path    string    // where the file was, absolute
	Deleted time.Time // local time, to the second
}

// Escape URL-escapes a path as the specification asks (RFC 2396): every
// byte but letters, digits, "/" and -_.!~*'() becomes %XX.
func Escape(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if unreserved(c) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("/-_.!~*'()", c) >= 0
}

// Text is the .trashinfo file of the file at path (absolute) trashed at
// when into b: Path relative to b.Top when it lies below it, else
// absolute.
func (b Bin) Text(path string, when time.Time) []byte {
	p := path
	if b.Top != "" {
		if rel, err := filepath.Rel(b.Top, path); err == nil && !strings.HasPrefix(rel, "..") {
			p = rel
		}
	}
	return fmt.Appendf(nil, "[Trash Info]\nPath=%s\nDeletionDate=%s\n", Escape(p), when.Local().Format(dateLayout))
}

// Parse reads a .trashinfo file of b; a relative Path is made absolute
// from b.Top.
func (b Bin) Parse(text []byte) (Info, error) {
	var in Info
	sc := bufio.NewScanner(bytes.NewReader(text))
	if !sc.Scan() || sc.Text() != "[Trash Info]" {
		return in, errors.New("trash: info file does not start with [Trash Info]")
	}
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "Path":
			p, err := url.PathUnescape(v)
			if err != nil {
				return in, fmt.Errorf("trash: Path: %w", err)
			}
			if !filepath.IsAbs(p) {
				p = filepath.Join(b.Top, p)
			}
			in.Path = p
		case "DeletionDate":
			t, err := time.ParseInLocation(dateLayout, v, time.Local)
			if err != nil {
				return in, fmt.Errorf("trash: DeletionDate: %w", err)
			}
			in.Deleted = t
		}
	}
	if in.Path == "" || in.Deleted.IsZero() {
		return in, errors.New("trash: info file without Path or DeletionDate")
	}
	return in, nil
}

// nameFor is the n-th name for base: base, base.2, base.3 …
func nameFor(base string, n int) string {
	if n <= 1 {
		return base
	}
	return base + "." + strconv.Itoa(n)
}

// maxNames is how many names Free tries.
const maxNames = 10000

// Free returns the first of base, base.2, base.3 … that neither files/
// nor info/ holds. Reserve takes it for good.
func (o *Opened) Free(base string) (string, error) {
	for n := 1; n <= maxNames; n++ {
		name := nameFor(base, n)
		if !exists(o.files, name) && !exists(o.info, name+".trashinfo") {
			return name, nil
		}
	}
	return "", fmt.Errorf("trash: %s: no free name after %d", o.Dir, maxNames)
}

func exists(dir *os.File, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// ErrTaken: another program took the name between Free and Reserve.
var ErrTaken = errors.New("trash: the name was taken meanwhile")

// Reserve writes info/NAME.trashinfo with text, created with O_EXCL and
// synced, owned by the trash's user.
func (o *Opened) Reserve(name string, text []byte) error {
	ifd := int(o.info.Fd())
	fd, err := unix.Openat(ifd, name+".trashinfo", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) || err == nil && exists(o.files, name) {
		if err == nil {
			unix.Close(fd)
			unix.Unlinkat(ifd, name+".trashinfo", 0)
		}
		return ErrTaken
	}
	if err != nil {
		return fmt.Errorf("trash: %s: %w", o.infoPath(name), err)
	}
	f := os.NewFile(uintptr(fd), o.infoPath(name))
	_, err = f.Write(text)
	err = errors.Join(err, f.Chown(o.UID, -1), f.Sync(), f.Close(), durable.SyncDir(ifd))
	if err != nil {
		unix.Unlinkat(ifd, name+".trashinfo", 0)
		return fmt.Errorf("trash: %s: %w", o.infoPath(name), err)
	}
	return nil
}

// Move renames name in the folder dfd to files/NAME, never over a file
// there, and syncs both folders.
func (o *Opened) Move(dfd int, name, trashName string) error {
	ffd := int(o.files.Fd())
	if err := unix.Renameat2(dfd, name, ffd, trashName, unix.RENAME_NOREPLACE); err != nil {
		return fmt.Errorf("trash: move to %s: %w", filepath.Join(o.Dir, "files", trashName), err)
	}
	return errors.Join(durable.SyncDir(ffd), durable.SyncDir(dfd))
}

// MoveBack renames files/NAME back to name in the folder dfd, never over
// a file there, removes its info file and syncs the folders: a move
// undone.
func (o *Opened) MoveBack(dfd int, name, trashName string) error {
	ffd := int(o.files.Fd())
	if err := unix.Renameat2(ffd, trashName, dfd, name, unix.RENAME_NOREPLACE); err != nil {
		return fmt.Errorf("trash: move %s back: %w", filepath.Join(o.Dir, "files", trashName), err)
	}
	return errors.Join(durable.SyncDir(dfd), durable.SyncDir(ffd), o.Unreserve(trashName))
}

// Unreserve removes info/NAME.trashinfo when files/NAME is not there:
// the info file of a move that did not happen.
func (o *Opened) Unreserve(name string) error {
	if exists(o.files, name) {
		return nil
	}
	ifd := int(o.info.Fd())
	err := unix.Unlinkat(ifd, name+".trashinfo", 0)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("trash: remove %s: %w", o.infoPath(name), err)
	}
	return durable.SyncDir(ifd)
}

// Holds reports whether files/NAME is the inode ino.
func (o *Opened) Holds(name string, ino uint64) bool {
	var st unix.Stat_t
	return unix.Fstatat(int(o.files.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Ino == ino
}

// ReadInfo reads info/NAME.trashinfo.
func (o *Opened) ReadInfo(name string) (Info, error) {
	fd, err := unix.Openat(int(o.info.Fd()), name+".trashinfo", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Info{}, fmt.Errorf("trash: %s: %w", o.infoPath(name), err)
	}
	f := os.NewFile(uintptr(fd), o.infoPath(name))
	defer f.Close()
	text, err := readAll(f)
	if err != nil {
		return Info{}, err
	}
	return o.Parse(text)
}

func readAll(f *os.File) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(f)
	return buf.Bytes(), err
}

func (o *Opened) infoPath(name string) string {
	return filepath.Join(o.Dir, "info", name+".trashinfo")
}
