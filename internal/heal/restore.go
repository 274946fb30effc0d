package heal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/audit"
)

// Names a heal makes in the rotten file's folder. The daemon never
// indexes them (TempPattern).
const (
	// TempPrefix starts the temporary file's name; the random id of the
	// heal follows.
	TempPrefix = ".annexd-heal-"
	// AsideSuffix ends the name the rotten bytes are kept under: the
	// temporary name plus it.
	AsideSuffix = ".rotten"
	// TempPattern is the ignore pattern of both names.
	TempPattern = TempPrefix + "*"
)

// testHook, set only by tests, runs at each step of a restore
// ("chosen", "filled", "verified", "leased", "exchanged", "aside"), with the
// temporary file's path (the copy's for "chosen").
var testHook func(step, temp string)

func step(name, temp string) {
	if testHook != nil {
		testHook(name, temp)
	}
}

// Answers of a restore beside the outcomes: unreachable, other hosts
// cannot be asked now (the file's outcome is then no_copy, to be tried
// again: File.Again); failed, the heal failed on this side (no room for
// the copy, the file's attributes, the ledger), which another copy would
// not change: refused, and the copy still counts as healthy; unlifted,
// the file was restored but the audit did not lift its finding.
const (
	unreachable = "unreachable"
	failed      = "failed"
	unlifted    = "unlifted"
)

// source is a verified copy on this host.
type source struct {
	path string
	fi   fsstat.FileInfo
}

// fill writes the copy's bytes to the temporary file tf, and names the
// host they came from ("" for this one).
type fill func(ctx context.Context, tf *os.File) (host string, err error)

// restore puts the bytes of src in place of the rotten file r. It
// returns Healed and where the rotten bytes are kept, Changed and why
// (the rotten file changed: nothing was done), or Refused and why (this
// copy could not be used).
func (h *Healer) restore(ctx context.Context, r *rot, p *audit.Problem, src source) (string, string) {
	step("chosen", src.path)
	fillFrom := func(ctx context.Context, tf *os.File) (string, error) { return "", cloneFrom(tf, src) }
	res, why, _ := h.put(ctx, r, p, fillFrom, src.path)
	return res, why
}

// fromRemote asks the Remote for a verified copy and puts it in place.
func (h *Healer) fromRemote(ctx context.Context, r *rot, p *audit.Problem) (string, string, string) {
	fillFrom := func(ctx context.Context, tf *os.File) (string, error) {
		return h.o.Remote.Fetch(ctx, p.RecordedKey, tf)
	}
	res, why, host := h.put(ctx, r, p, fillFrom, "")
	if res != Healed && host != "" {
		why = "the copy from " + host + ": " + why
	}
	return res, host, why
}

// put journals the heal, fills a temporary file, and swaps it in. Every
// name it makes is made in the rotten file's folder as opened once, by
// its descriptor: a folder moved or replaced by a symlink meanwhile gets
// no write, and no temporary file is left in it.
func (h *Healer) put(ctx context.Context, r *rot, p *audit.Problem, fillFrom fill, srcPath string) (res, why, host string) {
	in := intent{ID: newID(), Path: r.path, Ino: r.fi.Ino, Key: p.RecordedKey, Source: srcPath}
	dir := filepath.Dir(r.path)
	temp := filepath.Join(dir, TempPrefix+in.ID)
	d, why := openFolder(dir)
	if d == nil {
		return Changed, why, ""
	}
	defer d.Close()
	if err := h.putIntent(ctx, &in); err != nil {
		return failed, "cannot journal the heal: " + err.Error(), ""
	}
	res, why, host = h.swap(ctx, r, d, fillFrom, temp)
	if res != Healed {
		unix.Unlinkat(int(d.Fd()), filepath.Base(temp), 0) // never our rotten inode: that only follows a swap
		h.dropIntent(ctx, in.ID)
		return res, why, host
	}
	aside := temp + AsideSuffix
	err := h.au.Healed(ctx, audit.HealRecord{Path: []byte(r.path), Key: in.Key, Source: srcPath, Host: host,
		Aside: aside, AsideIno: r.fi.Ino})
	h.dropIntent(ctx, in.ID)
	if err != nil {
		return unlifted, fmt.Sprintf("restored, the rotten bytes kept at %s (remove them by hand once checked), but the audit did not lift the finding: %v", aside, err), host
	}
	return Healed, aside, host
}

// openFolder opens dir, which must be a folder and not a symlink; else
// nil and why.
func openFolder(dir string) (*os.File, string) {
	d, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, "its folder was moved or replaced (by a symlink?) since it was flagged: " + err.Error()
	}
	return d, ""
}

// folderMoved says how dir no longer names the folder d: it was moved,
// or replaced by another folder or a symlink. "" when it still does.
func folderMoved(dir string, d *os.File) string {
	want, err := fsstat.Fstat(int(d.Fd()))
	if err != nil {
		return "cannot stat its folder: " + err.Error()
	}
	now, err := fsstat.Lstat(dir)
	if err != nil || now.Dev != want.Dev || now.Ino != want.Ino {
		return "its folder was moved or replaced during the heal; nothing was written through its old name"
	}
	return ""
}

// swap fills temp, checks it and the rotten file, and exchanges them in
// folder d; the rotten inode then goes aside. host is the Remote's host,
// if any.
func (h *Healer) swap(ctx context.Context, r *rot, d *os.File, fillFrom fill, temp string) (res, why, host string) {
	dfd, tbase, dir := int(d.Fd()), filepath.Base(temp), filepath.Dir(r.path)
	fd, err := unix.Openat(dfd, tbase, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return failed, "cannot make the temporary file: " + err.Error(), ""
	}
	tf := os.NewFile(uintptr(fd), temp)
	defer tf.Close()
	host, err = fillFrom(ctx, tf)
	if err != nil {
		if errors.Is(err, ErrNoCopy) {
			return NoCopy, "no other host holds a verified copy", host
		}
		if errors.Is(err, ErrUnreachable) {
			return unreachable, err.Error(), host
		}
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EROFS) {
			return failed, "cannot write the copy: " + err.Error(), host
		}
		return Refused, "cannot copy: " + err.Error(), host
	}
	step("filled", temp)
	if why := folderMoved(dir, d); why != "" {
		return Changed, why, host
	}
	if err := copyAttrs(tf, r.path); err != nil {
		return failed, "cannot give the copy the file's owner, mode, xattrs and times: " + err.Error(), host
	}
	tfi, err := fsstat.Lstat(temp)
	if err != nil || tfi.Size != r.rec.Size {
		return Refused, fmt.Sprintf("the copy has %d bytes, not %d", tfi.Size, r.rec.Size), host
	}
	if !h.verify(ctx, temp, tfi, r) {
		return Refused, "the copy's bytes did not verify once written (it rotted or changed after it was chosen)", host
	}
	step("verified", temp)
	if h.o.SyncWrites != nil {
		if err := h.o.SyncWrites(ctx); err != nil {
			return failed, "cannot catch up with the write ledger: " + err.Error(), host
		}
	}
	ls, err := leaseRotten(dfd, filepath.Base(r.path), r.fi.Ino)
	if errors.Is(err, errInUse) {
		return Busy, "another process holds the file open: not touched; heal it again once it is closed", host
	}
	if err != nil {
		return Changed, "the file changed since it was flagged: " + err.Error(), host
	}
	defer ls.release()
	step("leased", temp)
	now, err := fsstat.Lstat(r.path)
	if err != nil {
		return Changed, "the file changed since it was flagged: " + err.Error(), host
	}
	if why := h.changed(r, now); why != "" {
		return Changed, why, host
	}
	if why := folderMoved(dir, d); why != "" {
		return Changed, why, host
	}
	if why := exchange(dfd, tbase, filepath.Base(r.path), r.fi.Ino); why != "" {
		return Changed, why, host
	}
	step("exchanged", temp)
	if !ls.intact() {
		why, ok := undo(dfd, tbase, filepath.Base(r.path))
		if ok {
			return Busy, why, host
		}
		h.log.Error("a process opened the file during its heal", "path", r.path, "err", why)
	}
	if err := putAsideAt(dfd, tbase, r.fi.Ino); err != nil {
		// The healed file is in place and the rotten one under temp:
		// Recover puts it aside at the next start.
		h.log.Error("cannot put the rotten bytes aside", "path", r.path, "temp", temp, "err", err)
	}
	step("aside", temp)
	return Healed, "", host
}

// exchange swaps the names temp and name in folder dfd atomically, and
// checks that name held the rotten inode ino; when another file took the
// name meanwhile it swaps back and says so.
func exchange(dfd int, temp, name string, ino uint64) string {
	if err := unix.Renameat2(dfd, temp, dfd, name, unix.RENAME_EXCHANGE); err != nil {
		return "cannot swap the copy in: " + err.Error()
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, temp, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Ino == ino {
		return ""
	}
	if err := unix.Renameat2(dfd, temp, dfd, name, unix.RENAME_EXCHANGE); err != nil {
		return "another file took the name during the heal, and swapping it back failed: " + err.Error()
	}
	return "another file took the name during the heal; it was put back"
}

// undo swaps the rotten file back into its name after a process opened it
// during the swap: its writes then land at the name, not aside.
// When that fails (ok false) the heal stands and the rotten bytes go
// aside as usual.
func undo(dfd int, temp, name string) (why string, ok bool) {
	if err := unix.Renameat2(dfd, temp, dfd, name, unix.RENAME_EXCHANGE); err != nil {
		return "swapping the rotten file back failed: " + err.Error(), false
	}
	return "a process opened the file during the heal: the file was put back as it was; heal it again once it is closed", true
}

// putAside renames the rotten inode ino from temp to temp+AsideSuffix and
// syncs the folder.
func putAside(temp string, ino uint64) error {
	d, why := openFolder(filepath.Dir(temp))
	if d == nil {
		return errors.New("heal: " + why)
	}
	defer d.Close()
	return putAsideAt(int(d.Fd()), filepath.Base(temp), ino)
}

// putAsideAt is putAside in folder dfd.
func putAsideAt(dfd int, temp string, ino uint64) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, temp, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Ino != ino {
		return fmt.Errorf("heal: %s is not the rotten file", temp)
	}
	if err := unix.Renameat2(dfd, temp, dfd, temp+AsideSuffix, unix.RENAME_NOREPLACE); err != nil {
		return err
	}
	return unix.Fsync(dfd)
}

// cloneFrom fills tf with the bytes of src: a reflink (FICLONE) where
// both are on one file system that can share extents, else a copy. The
// copy is opened again and must be the file verified.
func cloneFrom(tf *os.File, src source) error {
	sf, err := os.OpenFile(src.path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer sf.Close()
	fi, err := fsstat.Fstat(int(sf.Fd()))
	if err != nil {
		return err
	}
	if !fi.Same(src.fi) {
		return fmt.Errorf("%s changed since it was verified", src.path)
	}
	if err := unix.IoctlFileClone(int(tf.Fd()), int(sf.Fd())); err == nil {
		return nil
	}
	if _, err := io.Copy(tf, io.NewSectionReader(sf, 0, src.fi.Size)); err != nil {
		return err
	}
	return nil
}

// copyAttrs gives tf the owner, group, xattrs (ACLs among them), mode
// and times of the file at path, and syncs it.
func copyAttrs(tf *os.File, path string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return err
	}
	fd := int(tf.Fd())
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := copyXattrs(fd, path); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return err
	}
	if err := tf.Sync(); err != nil {
		return err
	}
	ts := []unix.Timespec{unix.NsecToTimespec(st.Atim.Nano()), unix.NsecToTimespec(st.Mtim.Nano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, tf.Name(), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	return tf.Sync()
}

// copyXattrs sets on fd every extended attribute of path.
func copyXattrs(fd int, path string) error {
	names, err := listXattrs(path)
	if err != nil {
		return err
	}
	for _, n := range names {
		v, err := getXattr(path, n)
		if err != nil {
			return err
		}
		if err := unix.Fsetxattr(fd, n, v, 0); err != nil {
			return fmt.Errorf("xattr %s: %w", n, err)
		}
	}
	return nil
}

func listXattrs(path string) ([]string, error) {
	n, err := unix.Llistxattr(path, nil)
	if err != nil || n == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		return nil, err
	}
	buf := make([]byte, n)
	n, err = unix.Llistxattr(path, buf)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range splitNul(buf[:n]) {
		out = append(out, string(b))
	}
	return out, nil
}

func splitNul(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		if i > 0 {
			out = append(out, b[:i])
		}
		if i == len(b) {
			break
		}
		b = b[i+1:]
	}
	return out
}

func getXattr(path, name string) ([]byte, error) {
	n, err := unix.Lgetxattr(path, name, nil)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	n, err = unix.Lgetxattr(path, name, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
