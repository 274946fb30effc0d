package dedup

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/roots"
)

// hardlink replaces the one name of a target inode with a link to the
// keeper. Before it acts it checks what a link would change (owner,
// group, mode, xattrs, links the plan does not know, on either side) and
// what the kernel would refuse; it leases both files, so that no process
// holds the target open and none holds the keeper open for writing, and
// compares the bytes under the leases. The exchange itself (relink) is
// undone when anyone touches the old copy before it is gone.
func (r *run) hardlink(ctx context.Context, g *Group, keeper *side, a Action) (int64, Reason, error) {
	if len(a.Targets) != 1 {
		return 0, SkipLinks, fmt.Errorf("the copy has %d names: hard-link mode relinks only a copy with one name, so that each step can be undone", len(a.Targets))
	}
	target := &side{path: a.Targets[0].Path, rec: a.Targets[0].Record}
	defer target.close()
	if reason, err := r.openSide(target); reason != "" {
		return 0, reason, err
	}
	if reason, err := r.linkable(keeper, target); reason != "" {
		return 0, reason, err
	}
	if reason, err := r.keeperLinks(keeper); reason != "" {
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
	linked, reason, err := r.relink(ctx, keeper, target)
	if linked {
		r.relinked(g, target.path) // done or undone, both names' ctimes changed
	}
	if reason != "" {
		return 0, reason, err
	}
	keeper.names = append(keeper.names, target.path)
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

// linkable refuses a link that would change what the target's name
// shows, that the kernel would refuse, or that the caller could not make.
func (r *run) linkable(keeper, target *side) (Reason, error) {
	kst, tst := &keeper.st, &target.st
	if !r.access.canModify(target.path, tst) {
		return SkipPermission, nil
	}
	if kst.Uid != tst.Uid || kst.Gid != tst.Gid || kst.Mode != tst.Mode {
		return SkipMetadata, fmt.Errorf("keeper %d:%d %#o, target %d:%d %#o",
			kst.Uid, kst.Gid, kst.Mode&0o7777, tst.Uid, tst.Gid, tst.Mode&0o7777)
	}
	if tst.Nlink != 1 {
		return SkipLinks, fmt.Errorf("the copy has %d links, 1 of them in the plan", tst.Nlink)
	}
	// Checked again on the directory's descriptor before the exchange.
	dir := filepath.Dir(string(target.path))
	var dst unix.Stat_t
	if unix.Lstat(dir, &dst) != nil || !r.access.canReplace(dir, &dst, tst) {
		return SkipPermission, nil
	}
	for _, s := range []*side{keeper, target} {
		if why := kernelRefuses(int(s.f.Fd())); why != "" {
			return SkipRefused, fmt.Errorf("%s is %s", s.path, why)
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

// keeperLinks makes sure every link of the keeper is a name the run
// knows: one the index holds for it, inside the roots and outside
// git-annex's object store, one this run linked to it, or the temporary
// link of a step left for recovery. A link elsewhere (an annex.thin
// object, a name outside every root) would make an edit of the copy
// change that file too. It sets keeper.links to their number.
func (r *run) keeperLinks(keeper *side) (Reason, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(keeper.f.Fd()), &st); err != nil {
		return SkipError, err
	}
	for _, p := range keeper.names {
		if !r.d.inRoots(p) || bytes.Contains(p, annexStore) {
			return SkipLinks, fmt.Errorf("the keeper has a name outside the roots or in git-annex's object store: %s", p)
		}
		var ls unix.Stat_t
		if err := statBeneath(p, &ls); err != nil || ls.Ino != st.Ino || ls.Dev != st.Dev {
			return SkipChanged, fmt.Errorf("the keeper's name %s no longer names it", p)
		}
	}
	known := uint64(len(keeper.names))
	for _, p := range r.pending {
		var ls unix.Stat_t
		if statBeneath(p, &ls) == nil && ls.Ino == st.Ino && ls.Dev == st.Dev {
			known++
		}
	}
	if st.Nlink != known {
		return SkipLinks, fmt.Errorf("the keeper has %d links, %d of them known to the index: a link elsewhere (a git-annex object, a name outside the roots) would change with the copy",
			st.Nlink, known)
	}
	keeper.links = known
	return "", nil
}

// inRoots reports whether p is inside one of Options.Roots, or there are
// none.
func (d *Deduper) inRoots(p []byte) bool {
	if len(d.opt.Roots) == 0 {
		return true
	}
	for _, root := range d.opt.Roots {
		if roots.Within(string(p), string(root)) {
			return true
		}
	}
	return false
}

// statBeneath stats the name at path without following a symlink in any
// component of it.
func statBeneath(path []byte, st *unix.Stat_t) error {
	dir, err := openPath([]byte(filepath.Dir(string(path))), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer dir.Close()
	return unix.Fstatat(int(dir.Fd()), filepath.Base(string(path)), st, unix.AT_SYMLINK_NOFOLLOW)
}

// The inode flags (chattr) under which the kernel refuses a link, a
// rename or an unlink, from linux/fs.h.
const (
	flagImmutable  = 0x10 // FS_IMMUTABLE_FL, chattr +i
	flagAppendOnly = 0x20 // FS_APPEND_FL, chattr +a
)

// kernelRefuses says why the kernel would refuse to link, rename or
// remove the file or folder fd, or "". A file system without the flags
// refuses nothing for them.
func kernelRefuses(fd int) string {
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	switch {
	case err != nil:
		return ""
	case flags&flagImmutable != 0:
		return "immutable (chattr +i)"
	case flags&flagAppendOnly != 0:
		return "append-only (chattr +a)"
	}
	return ""
}

// leaseBoth takes a read lease on the keeper and a write lease on the
// target. The kernel grants a read lease only while no process holds the
// file open for writing, and a write lease only while no other process
// holds it open at all. While they are held, a process that opens the
// keeper for writing, or the target in any way, or truncates either,
// waits (lease-break-time, 45 s by default) until they are released, and
// the lease shows it.
func leaseBoth(keeper, target *os.File) (release func(), reason Reason, err error) {
	if err := setLease(keeper, unix.F_RDLCK); err != nil {
		return nil, leaseReason(err, SkipOpen), fmt.Errorf("keeper: %w", err)
	}
	if err := setLease(target, unix.F_RDLCK); err != nil {
		unlease(keeper)
		return nil, leaseReason(err, SkipOpen), fmt.Errorf("target: %w", err)
	}
	if err := setLease(target, unix.F_WRLCK); err != nil {
		unlease(target)
		unlease(keeper)
		return nil, leaseReason(err, SkipInUse), fmt.Errorf("target: another process holds it open: %w", err)
	}
	return func() { unlease(target); unlease(keeper) }, "", nil
}

// leaseReason is why a lease refused with err skips a pair: busy, when
// another process holds the file; refused otherwise (not the file's
// owner without CAP_LEASE, a file system without leases).
func leaseReason(err error, busy Reason) Reason {
	if errors.Is(err, unix.EAGAIN) {
		return busy
	}
	return SkipRefused
}

func setLease(f *os.File, typ int) error {
	_, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, typ)
	if err != nil {
		return fmt.Errorf("F_SETLEASE %s: %w", leaseName(typ), err)
	}
	return nil
}

func leaseName(typ int) string {
	if typ == unix.F_WRLCK {
		return "F_WRLCK"
	}
	return "F_RDLCK"
}

func unlease(f *os.File) { unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK) }

// leaseIntact reports whether f's lease of type typ is held, no process
// waits on it, and none has started to open f since: taking the lease
// again checks the kernel's count of the file's openers, which an open
// raises before it waits on the lease.
func leaseIntact(f *os.File, typ int) bool {
	t, err := unix.FcntlInt(f.Fd(), unix.F_GETLEASE, 0)
	return err == nil && t == typ && setLease(f, typ) == nil
}

// compare reads both files whole and checks they are still what their
// records say afterwards and that nobody came to wait on a lease.
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
	for _, s := range []struct {
		*side
		lease int
	}{{keeper, unix.F_RDLCK}, {target, unix.F_WRLCK}} {
		if reason, err := r.recheck(s.side); reason != "" {
			return reason, err
		}
		if !leaseIntact(s.f, s.lease) {
			return SkipOpen, fmt.Errorf("%s: a process opened it during the comparison", s.path)
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

// relinked notes the names whose records a relink made stale: the
// target's, now the keeper's inode, and the keeper's, whose ctime and
// link count changed. The group hands them back to the indexer when it
// is done, when no later link can change them again.
func (r *run) relinked(g *Group, target []byte) {
	if len(r.stale) == 0 {
		r.stale = append(r.stale, g.KeeperNames...)
	}
	r.stale = append(r.stale, target)
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

// xattrSum is one string for a set of xattrs: the hex SHA-256 of the
// names and values in name order.
func xattrSum(x map[string][]byte) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(x)) {
		fmt.Fprintf(h, "%d:%s%d:", len(k), k, len(x[k]))
		h.Write(x[k])
	}
	return hex.EncodeToString(h.Sum(nil))
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
