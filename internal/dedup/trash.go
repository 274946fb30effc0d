package dedup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/trash"
)

// TrashStep is the part of an intent that moves a copy to the trash:
// which trash, and the name it takes there.
type TrashStep struct {
	Dir  string `json:"dir"`           // the trash folder
	Top  string `json:"top,omitempty"` // what its info files' paths are relative to
	UID  int    `json:"uid"`
	Name string `json:"name"` // in files/, and info/NAME.trashinfo
}

// bin is the trash the step uses.
func (t *TrashStep) bin() trash.Bin { return trash.Bin{Dir: t.Dir, Top: t.Top, UID: t.UID} }

// TrashPatterns are the ignore patterns of the trash folders a run may
// move copies to, at any depth: the daemon adds them after every other
// pattern, so a trash inside a root is never indexed again.
var TrashPatterns = []string{".Trash/", ".Trash-*/", "**/.local/share/Trash/"}

// trashCopy moves a target with one name to the trash of its file
// system, with the same checks as hardlink mode: the caller could modify
// the copy and remove its name, nobody holds the copy open (a write
// lease) nor the keeper open for writing (a read lease), and the bytes
// are compared under the leases. It frees what the copy holds alone.
func (r *run) trashCopy(ctx context.Context, keeper *side, a Action) (int64, Reason, error) {
	if len(a.Targets) != 1 {
		return 0, SkipLinks, fmt.Errorf("the copy has %d names: trash mode moves only a copy with one name", len(a.Targets))
	}
	target := &side{path: a.Targets[0].Path, rec: a.Targets[0].Record}
	defer target.close()
	if reason, err := r.openSide(target); reason != "" {
		return 0, reason, err
	}
	if reason, err := r.trashable(target); reason != "" {
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
	if reason, err := r.moveToTrash(ctx, target); reason != "" {
		return 0, reason, err
	}
	r.stale = append(r.stale, target.path) // the index learns it is gone
	return freed, "", nil
}

// trashable refuses a copy the caller could not modify, with other
// names, or that the kernel would not let go.
func (r *run) trashable(target *side) (Reason, error) {
	if !r.access.canModify(target.path, &target.st) {
		return SkipPermission, nil
	}
	if target.st.Nlink != 1 {
		return SkipLinks, fmt.Errorf("the copy has %d links: trashing one name frees nothing", target.st.Nlink)
	}
	if why := kernelRefuses(int(target.f.Fd())); why != "" {
		return SkipRefused, fmt.Errorf("%s is %s", target.path, why)
	}
	return "", nil
}

// trashMove is one move to the trash under way.
type trashMove struct {
	dir    *os.File // the copy's folder
	dirIno uint64
	name   string
	bin    *trash.Opened
	text   []byte // its info file
}

// moveToTrash moves the copy's name into the trash:
//
//  1. the copy's folder is opened and checked (the caller may remove the
//     name, the kernel would let it, it still names the copy);
//  2. an intent naming the trash and the name there is made durable;
//  3. info/NAME.trashinfo is written with O_EXCL and synced;
//  4. the copy is checked a last time (record, ledger, lease);
//  5. the name is renamed to files/NAME, and both folders synced;
//  6. for Grace the copy is looked at every 2 ms, as in hardlink mode: a
//     process that found its name before the move and opens or changes
//     it after shows in the lease or its stat, and the move is undone
//     (SkipRaced), the copy put back at its name with what was written;
//  7. the intent is dropped.
//
// Recovery (settleTrash) finishes a step cut short after 3 by keeping
// the move when files/NAME holds the copy, and rolls it back otherwise
// by removing the info file.
func (r *run) moveToTrash(ctx context.Context, target *side) (Reason, error) {
	m, reason, err := r.openMove(target)
	if reason != "" {
		return reason, err
	}
	defer m.dir.Close()
	defer m.bin.Close()
	for range 3 {
		reason, err := r.tryMove(ctx, m, target)
		if !errors.Is(err, trash.ErrTaken) {
			return reason, err
		}
	}
	return SkipError, fmt.Errorf("%s: %w three times", m.bin.Dir, trash.ErrTaken)
}

// openMove opens the copy's folder and its trash and checks the folder.
func (r *run) openMove(target *side) (*trashMove, Reason, error) {
	dirPath, name := filepath.Split(string(target.path))
	dir, err := openPath([]byte(filepath.Clean(dirPath)), unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, skipFor(err, target.path, target.rec.Dev), err
	}
	m := &trashMove{dir: dir, name: name}
	reason, err := r.checkFolder(m, target)
	if reason == "" {
		m.bin, err = r.openTrash(target)
		if err != nil {
			reason = SkipNoTrash
		}
	}
	if reason != "" {
		dir.Close()
		return nil, reason, err
	}
	m.text = m.bin.Text(string(target.path), time.Now())
	return m, "", nil
}

// checkFolder checks that the caller and the kernel would let the name
// go and that it still names the copy.
func (r *run) checkFolder(m *trashMove, target *side) (Reason, error) {
	var dst unix.Stat_t
	dfd := int(m.dir.Fd())
	if err := unix.Fstat(dfd, &dst); err != nil {
		return SkipError, err
	}
	m.dirIno = dst.Ino
	if !r.access.canReplace(m.dir.Name(), &dst, &target.st) {
		return SkipPermission, nil
	}
	if why := kernelRefuses(dfd); why != "" {
		return SkipRefused, fmt.Errorf("the folder %s is %s", m.dir.Name(), why)
	}
	if !namesInode(dfd, m.name, target.st.Ino) {
		return SkipChanged, fmt.Errorf("%s no longer names the copy", target.path)
	}
	return "", nil
}

// namesInode reports whether name in the folder dfd is the inode ino.
func namesInode(dfd int, name string, ino uint64) bool {
	var st unix.Stat_t
	return unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Ino == ino
}

// openTrash opens the trash of the copy's file system for the caller.
func (r *run) openTrash(target *side) (*trash.Opened, error) {
	uid := os.Getuid()
	if r.req.Caller != nil {
		uid = int(r.req.Caller.UID)
	}
	b, err := trash.Find(string(target.path), uint64(target.st.Dev), uid, string(r.req.DataHome))
	if err != nil {
		return nil, err
	}
	return trash.Open(b)
}

// tryMove takes a free name in the trash and moves the copy there; it
// returns trash.ErrTaken when another program took the name first.
func (r *run) tryMove(ctx context.Context, m *trashMove, target *side) (Reason, error) {
	tname, err := m.bin.Free(m.name)
	if err != nil {
		return SkipNoTrash, err
	}
	in := Intent{ID: token(), Dir: []byte(m.dir.Name()), DirIno: m.dirIno, Name: []byte(m.name),
		Dev: uint64(target.st.Dev), Target: target.st.Ino,
		Trash: &TrashStep{Dir: m.bin.Dir, Top: m.bin.Top, UID: m.bin.UID, Name: tname}}
	if err := r.d.opt.Intents.PutIntent(ctx, in); err != nil {
		return SkipError, err
	}
	r.step("trash-intent")
	drop := func() { r.d.opt.Intents.DeleteIntent(context.WithoutCancel(ctx), in.ID) }
	if err := m.bin.Reserve(tname, m.text); err != nil {
		drop()
		return SkipError, err
	}
	r.step("trash-info")
	reason, err := r.lastCheck(m, target)
	if reason == "" {
		err = m.bin.Move(int(m.dir.Fd()), m.name, tname)
	}
	if reason != "" || err != nil {
		if uerr := m.bin.Unreserve(tname); uerr != nil {
			return SkipError, errors.Join(err, uerr) // the intent stays: recovery removes the info file
		}
		drop()
		return cmpReason(reason, SkipError), err
	}
	r.step("trashed")
	reason, err = r.afterMove(m, target, tname)
	drop()
	return reason, err
}

// afterMove watches the moved copy for the grace and undoes the move
// when a process opened or changed it meanwhile. A copy whose name was
// taken again meanwhile stays in the trash, with its info file.
func (r *run) afterMove(m *trashMove, target *side, tname string) (Reason, error) {
	var t1 unix.Stat_t
	if err := unix.Fstat(int(target.f.Fd()), &t1); err != nil {
		return "", nil // moved; nothing more to watch
	}
	touched := watchMoved(target, &t1, r.d.grace())
	if touched == nil {
		if writerWaits(target.f) {
			r.d.log.Error("dedup: a process opened a copy for writing right after the grace; it writes to the copy in the trash",
				"path", string(target.path), "trash", m.bin.Dir, "name", tname)
		}
		return "", nil
	}
	unlease(target.f) // let the opener through: it finds the copy at its name again
	if err := m.bin.MoveBack(int(m.dir.Fd()), m.name, tname); err != nil {
		return SkipRaced, fmt.Errorf("%v; it stays in the trash as %s: %w", touched, tname, err)
	}
	return SkipRaced, fmt.Errorf("%v: put back", touched)
}

// watchMoved looks at the moved copy every graceStep for grace and
// says what touched it: an open (its lease) or a change (its stat).
func watchMoved(target *side, t1 *unix.Stat_t, grace time.Duration) error {
	deadline := time.Now().Add(grace)
	for {
		time.Sleep(min(graceStep, grace))
		var t unix.Stat_t
		if err := unix.Fstat(int(target.f.Fd()), &t); err != nil {
			return err
		}
		switch {
		case !sameStat(&t, t1, true):
			return fmt.Errorf("%s changed as it was moved to the trash", target.path)
		case !leaseIntact(target.f, unix.F_WRLCK):
			return fmt.Errorf("a process opened %s as it was moved to the trash", target.path)
		case !time.Now().Before(deadline):
			return nil
		}
	}
}

// lastCheck checks the copy right before the move: its record, the
// ledger, its name and its lease (nobody opened it since the comparison).
func (r *run) lastCheck(m *trashMove, target *side) (Reason, error) {
	if reason, err := r.recheck(target); reason != "" {
		return reason, err
	}
	if !namesInode(int(m.dir.Fd()), m.name, target.st.Ino) {
		return SkipChanged, fmt.Errorf("%s no longer names the copy", target.path)
	}
	if !leaseIntact(target.f, unix.F_WRLCK) {
		return SkipInUse, fmt.Errorf("%s: a process opened it before the move", target.path)
	}
	return "", nil
}

// step marks a step of a move done, for the tests.
func (r *run) step(s string) {
	stepDone(s)
	if r.d.opt.AtStep != nil {
		r.d.opt.AtStep(s)
	}
}

// TrashDir is the trash folder a copy at path goes to for the caller
// (nil: the daemon's user) with the data home dataHome, or "" when it has
// none a move could use (trash.Usable: what a dry run shows, the run
// takes). It makes nothing.
func TrashDir(path []byte, c *Caller, dataHome []byte) string {
	var st unix.Stat_t
	if unix.Lstat(string(path), &st) != nil {
		return ""
	}
	uid := os.Getuid()
	if c != nil {
		uid = int(c.UID)
	}
	b, err := trash.Find(string(path), uint64(st.Dev), uid, string(dataHome))
	if err == nil {
		b, err = trash.Usable(b)
	}
	if err != nil {
		return ""
	}
	return b.Dir
}

// cmpReason is r, or def when r is empty.
func cmpReason(r, def Reason) Reason {
	if r != "" {
		return r
	}
	return def
}

// settleTrash settles a move to the trash that a crash cut short: kept
// when the trash holds the copy (its info file was written first), rolled
// back otherwise by removing the info file, so the copy is at its name or
// in the trash with its info, never neither.
func (d *Deduper) settleTrash(ctx context.Context, in Intent) error {
	t := in.Trash
	o, err := trash.Open(t.bin())
	if err != nil {
		d.log.Warn("dedup recovery: the trash of an interrupted move is gone", "trash", t.Dir, "err", err)
		return d.opt.Intents.DeleteIntent(ctx, in.ID)
	}
	defer o.Close()
	path := filepath.Join(string(in.Dir), string(in.Name))
	if o.Holds(t.Name, in.Target) {
		if _, err := o.ReadInfo(t.Name); err != nil {
			d.log.Error("dedup recovery: a trashed copy has no readable info file", "trash", t.Dir, "name", t.Name, "err", err)
		}
		d.log.Info("dedup recovery: a move to the trash was finished", "path", path, "trash", t.Dir, "name", t.Name)
	} else {
		if err := o.Unreserve(t.Name); err != nil {
			return fmt.Errorf("dedup: recover %s: %w", path, err)
		}
		d.log.Info("dedup recovery: a move to the trash was rolled back", "path", path)
	}
	if ix := d.opt.Indexer; ix != nil {
		ix.Rehash(path)
	}
	return d.opt.Intents.DeleteIntent(ctx, in.ID)
}
