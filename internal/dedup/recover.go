package dedup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/durable"
	"github.com/annexd/annexd/key"
)

// Recover settles the hardlink steps that a crash cut short or that the
// kernel would not let a run finish, from the intent journal: each is
// settled as decide says, so every name holds what was last written to
// it and no temporary name is left. A move to the trash is settled by
// settleTrash. Apply in hardlink mode recovers
// first; the daemon also calls Recover at start. A step that cannot be
// settled yet (a folder made append-only) stays in the journal, is
// reported, and is tried again by the next recovery; it stops nothing.
func (d *Deduper) Recover(ctx context.Context) error {
	if d.opt.Intents == nil {
		return nil
	}
	if err := d.lock(ctx); err != nil {
		return err
	}
	defer d.unlock()
	return d.recover(ctx)
}

func (d *Deduper) recover(ctx context.Context) error {
	ins, err := d.opt.Intents.Intents()
	if err != nil || len(ins) == 0 {
		return err
	}
	var errs []error
	ins = slices.DeleteFunc(ins, func(in Intent) bool {
		if in.Trash != nil {
			errs = append(errs, d.settleTrash(ctx, in))
		}
		return in.Trash != nil
	})
	dirs := d.findDirs(ins)
	for _, in := range ins {
		errs = append(errs, d.settle(ctx, in, dirs[in.ID]))
	}
	return errors.Join(errs...)
}

// settle settles one step in the directory that holds it now ("": none
// under the roots) and drops its intent.
func (d *Deduper) settle(ctx context.Context, in Intent, dirPath string) error {
	if dirPath == "" {
		d.log.Warn("dedup recovery: the folder of an interrupted step is gone; its temporary name is nowhere under the roots",
			"dir", string(in.Dir), "temp", in.Temp)
		return d.opt.Intents.DeleteIntent(ctx, in.ID)
	}
	dir, err := openPath([]byte(dirPath), unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("dedup: recover %s: %w", dirPath, err)
	}
	defer dir.Close()
	dfd := int(dir.Fd())
	name := string(in.Name)
	st := state{name: who(dfd, name, &in), temp: who(dfd, in.Temp, &in)}
	if st.temp == holdsTarget && st.name != holdsTarget {
		var release func()
		st.targetClean, release = d.targetAsBefore(ctx, dirPath, dfd, &in, st.name)
		defer release()
		if !st.targetClean && st.name == holdsKeeper {
			st.keeperClean, release = d.keeperAsBefore(ctx, dirPath, dfd, &in)
			defer release()
		}
	}
	v := decide(st)
	kept, err := carryOut(dfd, &in, v)
	if err != nil {
		d.log.Warn("dedup recovery could not settle a step; the next recovery tries again", "dir", dirPath, "temp", in.Temp, "err", err)
		return fmt.Errorf("dedup: recover %s/%s: %w", dirPath, in.Temp, err)
	}
	switch v {
	case leave:
		d.log.Warn("dedup recovery left a file it did not make at a temporary name", "dir", dirPath, "temp", in.Temp)
		err := fmt.Errorf("dedup: recover %s/%s: %w: the temporary name holds a file this run did not make", dirPath, in.Temp, ErrForeign)
		return errors.Join(err, d.opt.Intents.DeleteIntent(ctx, in.ID)) // said once; a later recovery could do no more
	case keepBoth:
		d.log.Warn("dedup recovery: both the copy and its keeper were changed since the step; the old copy is kept beside the name",
			"path", filepath.Join(dirPath, name), "old_copy", filepath.Join(dirPath, kept))
	}
	if err := durable.SyncDir(dfd); err != nil {
		return fmt.Errorf("dedup: recover: fsync %s: %w", dirPath, err)
	}
	if ix := d.opt.Indexer; ix != nil && v != settled {
		ix.Rehash(filepath.Join(dirPath, name))
		if kept != "" {
			ix.Rehash(filepath.Join(dirPath, kept))
		}
		if len(in.KeeperPath) > 0 {
			ix.Rehash(string(in.KeeperPath)) // its ctime and link count changed
		}
	}
	return d.opt.Intents.DeleteIntent(ctx, in.ID)
}

// targetAsBefore reports whether the old copy at the step's temporary
// name is as it was before the step: one name, the same owner, group,
// mode, xattrs, size, mtime and bytes, and no process holds it open. It
// keeps a write lease on it until release, so nobody opens it meanwhile.
// Without a record of what it was (an older journal), only bytes equal
// to the keeper's at the name count.
func (d *Deduper) targetAsBefore(ctx context.Context, dirPath string, dfd int, in *Intent, name holder) (bool, func()) {
	var hashed *hasher.Result
	if in.Was != nil {
		r, ok := digestAs(ctx, filepath.Join(dirPath, in.Temp), in.Was)
		if !ok {
			return false, func() {}
		}
		hashed = &r
	}
	f, err := openAt(dfd, in.Temp)
	if err != nil {
		return false, func() {}
	}
	if setLease(f, unix.F_WRLCK) != nil {
		f.Close()
		return false, func() {}
	}
	release := func() { unlease(f); f.Close() }
	var t unix.Stat_t
	if unix.Fstat(int(f.Fd()), &t) != nil || t.Ino != in.Target || t.Nlink != 1 {
		return false, release
	}
	if hashed == nil {
		return name == holdsKeeper && sameAsAt(ctx, f, &t, dfd, string(in.Name)), release
	}
	w := in.Was
	x, err := xattrs(f)
	return err == nil && unchangedSince(&t, hashed) && t.Mode == w.Mode && t.Uid == w.UID && t.Gid == w.GID &&
		t.Size == w.Size && t.Mtim.Nano() == w.TargetMtimeNs && xattrSum(x) == w.Xattrs, release
}

// keeperAsBefore reports whether the keeper at the step's name is as it
// was before the step, with the copy's name as one more link: the same
// owner, group, mode, xattrs, size, mtime, bytes and link count, and no
// process holds it open for writing. It keeps a read lease on it until
// release.
func (d *Deduper) keeperAsBefore(ctx context.Context, dirPath string, dfd int, in *Intent) (bool, func()) {
	w := in.Was
	if w == nil {
		return false, func() {}
	}
	hashed, ok := digestAs(ctx, filepath.Join(dirPath, string(in.Name)), w)
	if !ok {
		return false, func() {}
	}
	f, err := openAt(dfd, string(in.Name))
	if err != nil {
		return false, func() {}
	}
	if setLease(f, unix.F_RDLCK) != nil {
		f.Close()
		return false, func() {}
	}
	release := func() { unlease(f); f.Close() }
	var k unix.Stat_t
	if unix.Fstat(int(f.Fd()), &k) != nil || k.Ino != in.Keeper {
		return false, release
	}
	x, err := xattrs(f)
	return err == nil && unchangedSince(&k, &hashed) && k.Mode == w.Mode && k.Uid == w.UID && k.Gid == w.GID &&
		k.Size == w.Size && k.Mtim.Nano() == w.KeeperMtimeNs && k.Nlink == w.KeeperLinks && xattrSum(x) == w.Xattrs, release
}

// digestAs hashes the file at path as the step recorded its bytes, and
// reports whether they are still those bytes.
func digestAs(ctx context.Context, path string, w *Was) (hasher.Result, bool) {
	b, err := key.ParseBackend(w.Backend)
	if err != nil {
		return hasher.Result{}, false
	}
	r, err := hasher.HashFile(ctx, path, b)
	return r, err == nil && bytes.Equal(r.Digest, w.Digest)
}

// unchangedSince reports whether st is the file hashed in r, unchanged.
func unchangedSince(st *unix.Stat_t, r *hasher.Result) bool {
	return st.Ino == r.Info.Ino && st.Size == r.Info.Size && st.Mtim.Nano() == r.Info.MtimeNs && st.Ctim.Nano() == r.Info.CtimeNs
}

// sameAsAt reports whether the open file f (stat st) has the bytes,
// owner, group and mode of the file at name in dfd.
func sameAsAt(ctx context.Context, f *os.File, st *unix.Stat_t, dfd int, name string) bool {
	g, err := openAt(dfd, name)
	if err != nil {
		return false
	}
	defer g.Close()
	var gs unix.Stat_t
	if unix.Fstat(int(g.Fd()), &gs) != nil || gs.Size != st.Size || gs.Mode != st.Mode || gs.Uid != st.Uid || gs.Gid != st.Gid {
		return false
	}
	same, err := sameBytes(ctx, f, g, st.Size)
	return err == nil && same
}

func openAt(dfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// findDirs finds the directory that holds each step now: its recorded
// path while that is still the same directory (by inode), or else the
// directory under the roots whose listing has the step's temporary name,
// for a folder renamed while the daemon was down. A step found nowhere
// maps to "".
func (d *Deduper) findDirs(ins []Intent) map[string]string {
	out := map[string]string{}
	lost := map[string]string{} // temporary name → intent id
	var lostDirs [][]byte
	for _, in := range ins {
		if sameDir(&in) {
			out[in.ID] = string(in.Dir)
			continue
		}
		lost[in.Temp] = in.ID
		lostDirs = append(lostDirs, in.Dir)
	}
	for _, root := range d.searchRoots(lostDirs) {
		if len(lost) == 0 {
			break
		}
		walkDirs(root, func(dir string, names []string) bool {
			for _, n := range names {
				if id, ok := lost[n]; ok {
					out[id] = dir
					delete(lost, n)
				}
			}
			return len(lost) > 0
		})
	}
	return out
}

// sameDir reports whether the step's recorded directory is still there
// as the same directory: the same inode, or, for an intent that did not
// record it, one that holds the temporary name.
func sameDir(in *Intent) bool {
	dir, err := openPath(in.Dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return false
	}
	defer dir.Close()
	if in.DirIno == 0 {
		var st unix.Stat_t
		return unix.Fstatat(int(dir.Fd()), in.Temp, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	}
	var st unix.Stat_t
	return unix.Fstat(int(dir.Fd()), &st) == nil && st.Ino == in.DirIno
}

// searchRoots are where recovery looks for a renamed folder: the roots,
// or without them the nearest folder still there above each lost one
// (never "/").
func (d *Deduper) searchRoots(lost [][]byte) []string {
	if len(lost) == 0 {
		return nil
	}
	if len(d.opt.Roots) > 0 {
		out := make([]string, len(d.opt.Roots))
		for i, r := range d.opt.Roots {
			out[i] = string(r)
		}
		return out
	}
	var out []string
	for _, p := range lost {
		dir := filepath.Dir(string(p))
		for ; dir != "/"; dir = filepath.Dir(dir) {
			if f, err := openPath([]byte(dir), unix.O_PATH|unix.O_DIRECTORY); err == nil {
				f.Close()
				out = append(out, dir)
				break
			}
		}
	}
	return out
}

// walkDirs calls fn with each directory at or below root on root's file
// system and the names in it, until fn returns false. It follows no
// symlink.
func walkDirs(root string, fn func(dir string, names []string) bool) {
	rf, err := openPath([]byte(root), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return
	}
	var rst unix.Stat_t
	err = unix.Fstat(int(rf.Fd()), &rst)
	rf.Close()
	if err != nil {
		return
	}
	stack := []string{root}
	for len(stack) > 0 {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		names, subdirs, ok := listDir(dir, uint64(rst.Dev))
		if !ok {
			continue
		}
		if !fn(dir, names) {
			return
		}
		stack = append(stack, subdirs...)
	}
}

// listDir lists the names in dir, and the subdirectories to walk, when
// dir is on the device dev (compared at this moment).
func listDir(dir string, dev uint64) (names, subdirs []string, ok bool) {
	f, err := openPath([]byte(dir), unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, nil, false
	}
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || uint64(st.Dev) != dev {
		return nil, nil, false
	}
	for {
		ents, err := f.ReadDir(1024)
		for _, e := range ents {
			names = append(names, e.Name())
			if e.IsDir() {
				subdirs = append(subdirs, filepath.Join(dir, e.Name()))
			}
		}
		if err != nil {
			return names, subdirs, true
		}
	}
}
