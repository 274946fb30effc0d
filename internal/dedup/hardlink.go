package dedup

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
)

// tempPrefix starts every temporary name hardlink mode makes.
const tempPrefix = ".annexd-dedup-"

// testHookStep, set only by tests, runs after each step of a relink: the
// crash tests kill the process there.
var testHookStep func(step string)

func stepDone(step string) {
	if testHookStep != nil {
		testHookStep(step)
	}
}

// hardlink replaces every name of one target inode with a link to the
// keeper. Before the first name it checks what a link would change: owner,
// group, mode, xattrs (ACLs among them), names outside the plan; it refuses
// when a process holds either file open for writing, and compares the
// bytes while read leases keep new writers waiting.
func (r *run) hardlink(ctx context.Context, g *Group, keeper *side, a Action) (int64, Reason, error) {
	target := &side{path: a.Targets[0].Path, rec: a.Targets[0].Record}
	defer target.close()
	if reason, err := r.openSide(target); reason != "" {
		return 0, reason, err
	}
	if reason, err := r.otherNames(target, a.Targets[1:]); reason != "" {
		return 0, reason, err
	}
	if reason, err := r.linkable(a, keeper, target); reason != "" {
		return 0, reason, err
	}
	release, reason, err := leaseBoth(keeper.f, target.f)
	if reason != "" {
		return 0, reason, err
	}
	defer release()
	if reason, err := r.compare(ctx, keeper, target); reason != "" {
		return 0, reason, err
	}
	freed := aloneBytes(target)
	for i, t := range a.Targets {
		if reason, err := r.relink(ctx, keeper, target, t.Path); reason != "" {
			if i > 0 {
				r.relinked(g, a)
			}
			return 0, reason, err
		}
	}
	r.relinked(g, a)
	return freed, "", nil
}

// aloneBytes is what removing the file s frees: the bytes of its extents
// that no other file shares, or, without an extent map, its blocks.
func aloneBytes(s *side) int64 {
	x, err := fiemap(int(s.f.Fd()), s.fi.Size)
	if err != nil {
		return s.st.Blocks * 512
	}
	_, alone := sharing(x, nil)
	return alone
}

// otherNames checks the target's other names against their records and
// makes sure they still name the same inode.
func (r *run) otherNames(target *side, names []File) (Reason, error) {
	for _, n := range names {
		s := &side{path: n.Path, rec: n.Record}
		reason, err := r.openSide(s)
		s.close()
		if reason != "" {
			return reason, err
		}
		if s.fi.Ino != target.fi.Ino || s.fi.Dev != target.fi.Dev {
			return SkipChanged, nil
		}
	}
	return "", nil
}

// linkable refuses a link that would change what the target's names show
// or that would free nothing, and a target the caller could not replace.
func (r *run) linkable(a Action, keeper, target *side) (Reason, error) {
	kst, tst := &keeper.st, &target.st
	if !r.access.canModify(target.path, tst) {
		return SkipPermission, nil
	}
	if kst.Uid != tst.Uid || kst.Gid != tst.Gid || kst.Mode != tst.Mode {
		return SkipMetadata, fmt.Errorf("keeper %d:%d %#o, target %d:%d %#o",
			kst.Uid, kst.Gid, kst.Mode&0o7777, tst.Uid, tst.Gid, tst.Mode&0o7777)
	}
	if int(tst.Nlink) != len(a.Targets) {
		return SkipLinks, fmt.Errorf("%d links, %d of them in the plan", tst.Nlink, len(a.Targets))
	}
	for _, t := range a.Targets {
		// Checked again on the directory's descriptor before each name.
		dir := filepath.Dir(string(t.Path))
		var dst unix.Stat_t
		if unix.Lstat(dir, &dst) != nil || !r.access.canReplace(dir, &dst, tst) {
			return SkipPermission, nil
		}
	}
	if lost, err := xattrsDiffer(keeper.f, target.f); err != nil || len(lost) > 0 {
		if err != nil {
			return SkipError, err
		}
		return SkipXattrs, fmt.Errorf("would lose or change %v", lost)
	}
	return "", nil
}

// leaseBoth takes read leases on both files. A read lease is refused with
// EAGAIN while any process holds the file open for writing, and while it
// is held a new writer's open waits (lease-break-time, 45 s by default)
// until the lease is released.
func leaseBoth(keeper, target *os.File) (release func(), reason Reason, err error) {
	if err := readLease(keeper); err != nil {
		return nil, SkipOpen, fmt.Errorf("keeper: %w", err)
	}
	if err := readLease(target); err != nil {
		unlease(keeper)
		return nil, SkipOpen, fmt.Errorf("target: %w", err)
	}
	return func() { unlease(target); unlease(keeper) }, "", nil
}

func readLease(f *os.File) error {
	_, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK)
	if err != nil {
		return fmt.Errorf("F_SETLEASE F_RDLCK: %w", err)
	}
	return nil
}

func unlease(f *os.File) { unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK) }

// leaseHeld reports whether f's read lease is held and no writer waits.
func leaseHeld(f *os.File) bool {
	t, err := unix.FcntlInt(f.Fd(), unix.F_GETLEASE, 0)
	return err == nil && t == unix.F_RDLCK
}

// compare reads both files whole and checks they are still what their
// records say afterwards and that no writer came to wait on a lease.
func (r *run) compare(ctx context.Context, keeper, target *side) (Reason, error) {
	same, err := sameBytes(ctx, keeper.f, target.f, target.fi.Size)
	if err != nil {
		return SkipError, err
	}
	if !same {
		r.rehash(keeper.path, target.path)
		return SkipDiffers, ErrDiffers
	}
	stepDone("compared")
	for _, s := range []*side{keeper, target} {
		if reason, err := r.recheck(s); reason != "" {
			return reason, err
		}
		if !leaseHeld(s.f) {
			return SkipOpen, fmt.Errorf("%s: a writer opened it during the comparison", s.path)
		}
	}
	return "", nil
}

// sameBytes compares the first size bytes of a and b and checks that
// both end there. A file shorter than size differs.
func sameBytes(ctx context.Context, a, b *os.File, size int64) (bool, error) {
	const step = 1 << 20
	ba, bb := make([]byte, step), make([]byte, step)
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		n := min(step, size-off)
		for _, x := range []struct {
			f   *os.File
			buf []byte
		}{{a, ba[:n]}, {b, bb[:n]}} {
			if _, err := x.f.ReadAt(x.buf, off); err != nil {
				return false, eofIsDifference(err)
			}
		}
		if !bytes.Equal(ba[:n], bb[:n]) {
			return false, nil
		}
		off += n
	}
	for _, f := range []*os.File{a, b} {
		if n, err := f.ReadAt(ba[:1], size); n != 0 || err != io.EOF {
			return false, eofIsDifference(err)
		}
	}
	return true, nil
}

func eofIsDifference(err error) error {
	if err == io.EOF {
		return nil
	}
	return err
}

// relink replaces one name of the target with a link to the keeper,
// through a descriptor of the name's directory: link the keeper under a
// temporary name, exchange it with the target's name atomically, remove
// the old target under the temporary name, and sync the directory. The
// name always holds a file; one that changed meanwhile is put back.
func (r *run) relink(ctx context.Context, keeper, target *side, path []byte) (Reason, error) {
	dirPath, name := filepath.Split(string(path))
	dir, err := openPath([]byte(filepath.Clean(dirPath)), unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return skipFor(err), err
	}
	defer dir.Close()
	dfd := int(dir.Fd())
	var dst unix.Stat_t
	if err := unix.Fstat(dfd, &dst); err != nil {
		return SkipError, err
	}
	if !r.access.canReplace(dir.Name(), &dst, &target.st) {
		return SkipPermission, nil
	}
	if !isInode(dfd, name, target.fi.Dev, target.fi.Ino) {
		return SkipChanged, fmt.Errorf("%s no longer names the target", path)
	}
	in := Intent{ID: token(), Dir: []byte(filepath.Clean(dirPath)), Name: []byte(name),
		Dev: target.fi.Dev, Keeper: keeper.fi.Ino, Target: target.fi.Ino}
	in.Temp = tempPrefix + in.ID
	if err := r.d.opt.Intents.PutIntent(ctx, in); err != nil {
		return SkipError, err
	}
	stepDone("intent")
	reason, err := swapIn(dfd, keeper.f, &in)
	if serr := unix.Fsync(dfd); err == nil && serr != nil {
		reason, err = SkipError, fmt.Errorf("fsync %s: %w", in.Dir, serr)
	}
	stepDone("synced")
	if reason != "" {
		// swapIn undid what it could; recovery settles the rest now.
		r.d.settle(context.WithoutCancel(ctx), in)
		return reason, err
	}
	if err := r.d.opt.Intents.DeleteIntent(context.WithoutCancel(ctx), in.ID); err != nil {
		return SkipError, err
	}
	if fi, err := fsstat.Fstat(int(keeper.f.Fd())); err == nil {
		keeper.linked = fi.CtimeNs
	}
	return "", nil
}

// relinked notes the names whose records a relink made stale: the
// target's, now the keeper's inode or with fewer links, and the keeper's,
// whose ctime and link count changed. The group hands them back to the
// indexer when it is done, when no later link can change them again.
func (r *run) relinked(g *Group, a Action) {
	if len(r.stale) == 0 {
		r.stale = append(r.stale, g.KeeperNames...)
	}
	for _, t := range a.Targets {
		r.stale = append(r.stale, t.Path)
	}
}

// swapIn links the keeper at in.Temp, exchanges it with in.Name, checks
// that the old name's file is the target and removes it. On any failure it
// undoes what it did, leaving in.Name as it found it.
func swapIn(dfd int, keeper *os.File, in *Intent) (Reason, error) {
	name := string(in.Name)
	if err := linkFD(keeper, dfd, in.Temp); err != nil {
		if errors.Is(err, unix.EXDEV) {
			return SkipOtherMount, err
		}
		return SkipError, fmt.Errorf("link: %w", err)
	}
	stepDone("linked")
	if !isInode(dfd, in.Temp, in.Dev, in.Keeper) {
		return SkipChanged, fmt.Errorf("the new link is not the keeper")
	}
	if err := unix.Renameat2(dfd, in.Temp, dfd, name, unix.RENAME_EXCHANGE); err != nil {
		unix.Unlinkat(dfd, in.Temp, 0)
		return reasonOfRemap(err), fmt.Errorf("exchange: %w", err)
	}
	stepDone("exchanged")
	if !isInode(dfd, in.Temp, in.Dev, in.Target) {
		// Another file took the name after the check: give it back.
		if err := unix.Renameat2(dfd, in.Temp, dfd, name, unix.RENAME_EXCHANGE); err != nil {
			return SkipError, fmt.Errorf("exchange back: %w", err)
		}
		if isInode(dfd, in.Temp, in.Dev, in.Keeper) {
			unix.Unlinkat(dfd, in.Temp, 0)
		}
		return SkipChanged, fmt.Errorf("%s was replaced during the run", name)
	}
	if err := unix.Unlinkat(dfd, in.Temp, 0); err != nil {
		return SkipError, fmt.Errorf("unlink the old target: %w", err)
	}
	stepDone("unlinked")
	return "", nil
}

// linkFD links the open file f as name in dfd. AT_EMPTY_PATH needs
// CAP_DAC_READ_SEARCH before Linux 6.10; /proc/self/fd serves otherwise.
func linkFD(f *os.File, dfd int, name string) error {
	err := unix.Linkat(int(f.Fd()), "", dfd, name, unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EPERM) {
		err = unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), dfd, name, unix.AT_SYMLINK_FOLLOW)
	}
	return err
}

// isInode reports whether name in dfd is the inode (dev, ino), unfollowed;
// dev is a file system id, as fsstat gives, or the device number an older
// intent holds (fsstat.OnFS).
func isInode(dfd int, name string, dev, ino uint64) bool {
	var st unix.Stat_t
	if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	return st.Ino == ino && fsstat.OnFS(dev, fsstat.FromStatAt(dfd, "", &st))
}

func token() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// xattrsDiffer lists the xattrs that are not the same on both files.
func xattrsDiffer(a, b *os.File) ([]string, error) {
	xa, err := xattrs(a)
	if err != nil {
		return nil, err
	}
	xb, err := xattrs(b)
	if err != nil {
		return nil, err
	}
	var diff []string
	for k, v := range xb {
		if w, ok := xa[k]; !ok || !bytes.Equal(v, w) {
			diff = append(diff, k)
		}
	}
	for k := range xa {
		if _, ok := xb[k]; !ok {
			diff = append(diff, k)
		}
	}
	slices.Sort(diff)
	return diff, nil
}

// xattrs reads every extended attribute of f.
func xattrs(f *os.File) (map[string][]byte, error) {
	fd := int(f.Fd())
	n, err := unix.Flistxattr(fd, nil)
	if err != nil || n == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, n)
	if n, err = unix.Flistxattr(fd, buf); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, name := range bytes.Split(bytes.TrimRight(buf[:n], "\x00"), []byte{0}) {
		v, err := getxattr(fd, string(name))
		if err != nil {
			return nil, err
		}
		out[string(name)] = v
	}
	return out, nil
}

func getxattr(fd int, name string) ([]byte, error) {
	n, err := unix.Fgetxattr(fd, name, nil)
	if err != nil {
		return nil, fmt.Errorf("getxattr %s: %w", name, err)
	}
	v := make([]byte, n)
	if n, err = unix.Fgetxattr(fd, name, v); err != nil {
		return nil, fmt.Errorf("getxattr %s: %w", name, err)
	}
	return v[:n], nil
}
