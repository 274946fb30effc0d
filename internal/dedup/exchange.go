package dedup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/durable"
)

// tempPrefix starts every temporary name hardlink mode makes. The daemon
// never indexes such a name (TempPattern), so the watcher takes no event
// on it for a write to another file.
const tempPrefix = ".annexd-dedup-"

// TempPattern is the ignore pattern of hardlink mode's temporary names,
// at any depth. The daemon adds it after every other pattern.
const TempPattern = tempPrefix + "*"

// keptInfix marks a name under which a step kept an old copy that a
// process changed while the copy's name already showed the keeper.
const keptInfix = ".annexd-kept-"

// testHookStep, set only by tests, runs after each step of a relink: the
// crash tests kill the process there.
var testHookStep func(step string)

func stepDone(step string) {
	if testHookStep != nil {
		testHookStep(step)
	}
}

// grace is Options.Grace or its default.
func (d *Deduper) grace() time.Duration {
	if d.opt.Grace > 0 {
		return d.opt.Grace
	}
	return 50 * time.Millisecond
}

// relink replaces the target's name with a link to the keeper, through a
// descriptor of the name's directory, with both files leased:
//
//  1. an intent is made durable;
//  2. the keeper is linked under a temporary name;
//  3. both files are checked again: nobody opened, changed or linked the
//     target, and the keeper's owner, group, mode, xattrs and links are
//     what the target's name shows;
//  4. the temporary name and the target's name are exchanged
//     (RENAME_EXCHANGE), so the name never goes missing and the old copy
//     stays linked, under the temporary name;
//  5. for Grace the old copy stays there, looked at every 2 ms: a process
//     that found the name before the exchange and opens, changes or links
//     the old copy after it shows in the lease or in the copy's stat;
//  6. the step is settled (decide): the old copy is removed when nobody
//     touched it; otherwise the exchange is undone, or, when the keeper
//     was touched through its names since the exchange too, both files
//     are kept and the old copy gets a visible name;
//  7. the directory is synced and the intent dropped.
//
// A step the kernel will not let it finish (a folder made append-only
// meanwhile) keeps its intent, for recovery to settle later. linked
// reports whether the keeper was linked, so its ctime changed, whatever
// came of it.
func (r *run) relink(ctx context.Context, keeper, target *side) (linked bool, reason Reason, err error) {
	s, reason, err := r.newSwap(keeper, target)
	if reason != "" {
		return false, reason, err
	}
	defer s.dir.Close()
	if err := r.d.opt.Intents.PutIntent(ctx, s.in); err != nil {
		return false, SkipError, err
	}
	stepDone("intent")
	out := s.run()
	if err := durable.SyncDir(s.dfd); err != nil && out.settled {
		out.reason, out.err, out.settled = SkipError, fmt.Errorf("fsync %s: %w", s.in.Dir, err), false
	}
	stepDone("synced")
	var k unix.Stat_t
	if unix.Fstat(int(keeper.f.Fd()), &k) == nil {
		keeper.linked = k.Ctim.Nano() // the step's links changed it; side.current allows that
	}
	r.report(s, out)
	if out.settled {
		if err := r.d.opt.Intents.DeleteIntent(context.WithoutCancel(ctx), s.in.ID); err != nil && out.reason == "" {
			return out.linked, SkipError, err
		}
	}
	return out.linked, out.reason, out.err
}

// newSwap opens the directory of the target's name, checks that the
// caller and the kernel would let the name be replaced and that it still
// names the target, and prepares the intent.
func (r *run) newSwap(keeper, target *side) (*swap, Reason, error) {
	dirPath, name := filepath.Split(string(target.path))
	dirPath = filepath.Clean(dirPath)
	dir, err := openPath([]byte(dirPath), unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, skipFor(err, target.path, target.rec.Dev), err
	}
	s := &swap{dir: dir, dfd: int(dir.Fd()), keeper: keeper, target: target, grace: r.d.grace()}
	reason, err := func() (Reason, error) {
		var dst unix.Stat_t
		if err := unix.Fstat(s.dfd, &dst); err != nil {
			return SkipError, err
		}
		if !r.access.canReplace(dirPath, &dst, &target.st) {
			return SkipPermission, nil
		}
		if why := kernelRefuses(s.dfd); why != "" {
			return SkipRefused, fmt.Errorf("the folder %s is %s", dirPath, why)
		}
		if err := s.prepare(dirPath, name, dst.Ino); err != nil {
			return SkipError, err
		}
		if who(s.dfd, name, &s.in) != holdsTarget {
			return SkipChanged, fmt.Errorf("%s no longer names the target", target.path)
		}
		return "", nil
	}()
	if reason != "" {
		dir.Close()
		return nil, reason, err
	}
	return s, "", nil
}

// report logs what a step did that a run's result does not say: an old
// copy kept beside its name, a step left for recovery, a writer that came
// too late.
func (r *run) report(s *swap, out outcome) {
	dir, target, keeper := string(s.in.Dir), string(s.target.path), string(s.keeper.path)
	if out.late {
		r.d.log.Error("dedup: a process opened the old copy for writing as it was removed; what it writes there is lost",
			"path", target, "keeper", keeper)
	}
	if out.kept != "" {
		kept := filepath.Join(dir, out.kept)
		r.d.log.Warn("dedup: a process changed the old copy while the name showed the keeper; both are kept",
			"path", target, "old_copy", kept, "keeper", keeper)
		r.rehash([]byte(kept))
	}
	if !out.settled {
		r.d.log.Warn("dedup: a step is left for recovery", "dir", dir, "temp", s.in.Temp, "err", out.err)
	}
}

// swap is one exchange of a copy's name for a link to its keeper, with
// what it needs to check and undo itself.
type swap struct {
	dir            *os.File
	dfd            int
	in             Intent
	keeper, target *side
	grace          time.Duration
	t1, k1         unix.Stat_t // the copy and the keeper right after the exchange
}

// outcome is how a swap ended: reason "" is done.
type outcome struct {
	reason  Reason
	err     error
	settled bool   // no temporary name is left: the intent can go
	kept    string // the name the old copy was kept under, or ""
	late    bool   // the old copy was opened as it was removed
	linked  bool   // the keeper was linked at the temporary name
}

// prepare fills in the intent: names, inodes, and what both files are.
func (s *swap) prepare(dir, name string, dirIno uint64) error {
	x, err := xattrs(s.target.f)
	if err != nil {
		return err
	}
	t, k := s.target, s.keeper
	s.in = Intent{ID: token(), Dir: []byte(dir), DirIno: dirIno, Name: []byte(name), Dev: t.fi.Dev,
		Keeper: k.st.Ino, Target: t.st.Ino, KeeperPath: k.path, Was: &Was{
			Backend: t.rec.Backend.String(), Digest: t.rec.Digest, Size: t.st.Size,
			TargetMtimeNs: t.st.Mtim.Nano(), KeeperMtimeNs: k.st.Mtim.Nano(),
			Mode: t.st.Mode, UID: t.st.Uid, GID: t.st.Gid, Xattrs: xattrSum(x),
			KeeperLinks: k.links + 1,
		}}
	s.in.Temp = tempPrefix + s.in.ID
	return nil
}

// run carries out steps 2 to 6 of relink.
func (s *swap) run() outcome {
	if err := linkFD(s.keeper.f, s.dfd, s.in.Temp); err != nil {
		return outcome{reason: kernelReason(err), err: fmt.Errorf("link: %w", err), settled: true}
	}
	stepDone("linked")
	out := s.exchange()
	out.linked = true
	return out
}

// exchange carries out steps 3 to 6 of relink, once the keeper has its
// temporary link.
func (s *swap) exchange() outcome {
	name, temp := string(s.in.Name), s.in.Temp
	if err := s.readyToExchange(); err != nil {
		return s.settle(err)
	}
	if err := unix.Renameat2(s.dfd, temp, s.dfd, name, unix.RENAME_EXCHANGE); err != nil {
		out := s.settle(fmt.Errorf("exchange: %w", err))
		if out.settled {
			out.reason = kernelReason(err)
		}
		return out
	}
	stepDone("exchanged")
	touched := s.afterExchange()
	if touched == nil {
		touched = s.watch()
	}
	return s.settle(touched)
}

// graceStep is how often the old copy is looked at during the grace.
const graceStep = 2 * time.Millisecond

// watch looks at the old copy every graceStep for the grace and returns
// as soon as somebody touched it. Settling then, rather than at the end,
// hands the process that touched it the copy sooner, and leaves less time
// in which the keeper can be touched through the name as well.
func (s *swap) watch() error {
	deadline := time.Now().Add(s.grace)
	for {
		time.Sleep(min(graceStep, s.grace))
		if err := s.sinceExchange(); err != nil || !time.Now().Before(deadline) {
			return err
		}
	}
}

// readyToExchange checks both files once the keeper has its temporary
// link: the copy is as it was checked, with one name, and its lease is
// whole; the keeper shows the copy's owner, group, mode and xattrs, has
// the links the run knows and the temporary one, and nobody opened it
// for writing.
func (s *swap) readyToExchange() error {
	var t, k unix.Stat_t
	if err := unix.Fstat(int(s.target.f.Fd()), &t); err != nil {
		return err
	}
	if err := unix.Fstat(int(s.keeper.f.Fd()), &k); err != nil {
		return err
	}
	switch {
	case !sameStat(&t, &s.target.st, true):
		return fmt.Errorf("%s changed, or was linked elsewhere, just before the exchange", s.target.path)
	case !leaseIntact(s.target.f, unix.F_WRLCK):
		return fmt.Errorf("a process opened %s just before the exchange", s.target.path)
	case k.Mode != t.Mode || k.Uid != t.Uid || k.Gid != t.Gid:
		return fmt.Errorf("the keeper %s changed owner, group or mode just before the exchange", s.keeper.path)
	case k.Nlink != s.in.Was.KeeperLinks:
		return fmt.Errorf("the keeper %s was linked elsewhere just before the exchange", s.keeper.path)
	case !leaseIntact(s.keeper.f, unix.F_RDLCK):
		return fmt.Errorf("a process opened the keeper %s for writing just before the exchange", s.keeper.path)
	}
	x, err := xattrs(s.keeper.f)
	if err != nil {
		return err
	}
	if xattrSum(x) != s.in.Was.Xattrs {
		return fmt.Errorf("the keeper's xattrs changed just before the exchange")
	}
	return nil
}

// afterExchange takes both files' stat right after the exchange and
// checks the copy: as before but for its ctime, which a rename may set.
func (s *swap) afterExchange() error {
	if err := unix.Fstat(int(s.target.f.Fd()), &s.t1); err != nil {
		return err
	}
	if err := unix.Fstat(int(s.keeper.f.Fd()), &s.k1); err != nil {
		return err
	}
	switch {
	case !sameStat(&s.t1, &s.target.st, false):
		return fmt.Errorf("%s changed, or was linked elsewhere, during the exchange", s.target.path)
	case !leaseIntact(s.target.f, unix.F_WRLCK):
		return fmt.Errorf("a process opened %s during the exchange", s.target.path)
	}
	return nil
}

// sinceExchange checks the old copy during the grace: nobody opened,
// changed, linked or set an xattr on it since the exchange.
func (s *swap) sinceExchange() error {
	var t unix.Stat_t
	if err := unix.Fstat(int(s.target.f.Fd()), &t); err != nil {
		return err
	}
	if !sameStat(&t, &s.t1, true) {
		return fmt.Errorf("%s changed, or was linked elsewhere, during the exchange", s.target.path)
	}
	if !leaseIntact(s.target.f, unix.F_WRLCK) {
		return fmt.Errorf("a process opened %s during the exchange", s.target.path)
	}
	x, err := xattrs(s.target.f)
	if err != nil {
		return err
	}
	if xattrSum(x) != s.in.Was.Xattrs {
		return fmt.Errorf("the xattrs of %s changed during the exchange", s.target.path)
	}
	return nil
}

// keeperUntouched reports whether the keeper is as the exchange left it:
// nobody opened it for writing, changed or linked it since.
func (s *swap) keeperUntouched() bool {
	var k unix.Stat_t
	return s.k1.Ino != 0 && unix.Fstat(int(s.keeper.f.Fd()), &k) == nil && sameStat(&k, &s.k1, true) &&
		leaseIntact(s.keeper.f, unix.F_RDLCK)
}

// settle decides the step by what its names hold now and by touched,
// what went wrong so far (nil: nothing), and carries the decision out.
func (s *swap) settle(touched error) outcome {
	name := string(s.in.Name)
	st := state{name: who(s.dfd, name, &s.in), temp: who(s.dfd, s.in.Temp, &s.in), targetClean: touched == nil}
	if st.temp == holdsTarget && touched != nil && st.name == holdsKeeper {
		st.keeperClean = s.keeperUntouched()
	}
	v := decide(st)
	kept, err := carryOut(s.dfd, &s.in, v)
	if err != nil {
		if touched != nil {
			err = fmt.Errorf("%v; then %w", touched, err)
		}
		return outcome{reason: kernelReason(err), err: err}
	}
	switch {
	case v == leave:
		return outcome{reason: SkipError, err: fmt.Errorf("%w: %s", ErrForeign, s.in.Temp), settled: true}
	case v == keepBoth:
		return outcome{reason: SkipRaced, err: fmt.Errorf("%v; the old copy is kept as %s", touched, kept), settled: true, kept: kept}
	case touched != nil:
		return outcome{reason: SkipRaced, err: fmt.Errorf("%v: undone", touched), settled: true}
	case st.name != holdsKeeper:
		return outcome{reason: SkipChanged, err: fmt.Errorf("%s was replaced or removed during the exchange", name), settled: true}
	}
	stepDone("unlinked")
	return outcome{settled: true, late: writerWaits(s.target.f)}
}

// writerWaits reports whether a process waits on f's write lease to
// write or truncate, or has begun to open f for writing. It may leave a
// read lease in place of the write lease.
func writerWaits(f *os.File) bool {
	t, err := unix.FcntlInt(f.Fd(), unix.F_GETLEASE, 0)
	return err != nil || t == unix.F_UNLCK || setLease(f, unix.F_RDLCK) != nil
}

// sameStat reports whether two stats of one file show the same inode,
// type, mode, owner, group, link count, size and mtime, and, when asked,
// ctime.
func sameStat(a, b *unix.Stat_t, ctime bool) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Mode == b.Mode && a.Uid == b.Uid && a.Gid == b.Gid &&
		a.Nlink == b.Nlink && a.Size == b.Size && a.Mtim == b.Mtim && (!ctime || a.Ctim == b.Ctim)
}

// kernelReason classifies a refusal of link, rename or unlink.
func kernelReason(err error) Reason {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES), errors.Is(err, unix.EMLINK), errors.Is(err, unix.EROFS):
		return SkipRefused
	case errors.Is(err, unix.EXDEV):
		return SkipOtherMount
	}
	return SkipError
}

// holder is what a name of a step holds.
type holder uint8

const (
	holdsNothing holder = iota // no such name
	holdsKeeper                // the keeper
	holdsTarget                // the old copy
	holdsOther                 // another file, or not a regular file
	holdsUnknown               // it cannot be looked at now (an I/O error, a file system shut down)
)

// who says what name in the directory dfd holds, by inode number on the
// directory's own file system, compared at this moment. A name that
// cannot be looked at is unknown, not another file: a file system shut
// down under a step answers EIO, and the step is settled once it is back.
func who(dfd int, name string, in *Intent) holder {
	var dst, st unix.Stat_t
	if unix.Fstat(dfd, &dst) != nil {
		return holdsUnknown
	}
	err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return holdsNothing
	case err != nil:
		return holdsUnknown
	case st.Dev != dst.Dev, st.Mode&unix.S_IFMT != unix.S_IFREG:
		return holdsOther
	case st.Ino == in.Keeper:
		return holdsKeeper
	case st.Ino == in.Target:
		return holdsTarget
	}
	return holdsOther
}

// verdict is how a step is settled.
type verdict uint8

const (
	settled  verdict = iota // no temporary name: nothing to do
	dropTemp                // remove the temporary name: the keeper's extra link, or an old copy nobody touched
	undo                    // exchange the names back, then remove the keeper's extra link
	keepBoth                // leave the name; give the old copy a visible name next to it
	leave                   // a file the step did not make is at the temporary name
	unsure                  // a name cannot be looked at: left for recovery
)

// errUnsure reports a step whose names cannot be looked at now.
var errUnsure = errors.New("what the step's names hold cannot be told now (an I/O error?): left for recovery")

// state is what settling a step looks at.
type state struct {
	name, temp holder
	// targetClean: the old copy is as it was before the step (bytes,
	// owner, group, mode, xattrs, one name) and nobody holds it open.
	targetClean bool
	// keeperClean: nobody wrote, changed or linked the keeper since the
	// exchange, so undoing it moves nothing done through the name.
	keeperClean bool
}

// decide settles a step. Nothing anyone did to either file is lost or
// moved to the other name:
//
//   - the keeper's temporary link is removed: it holds nothing of its own;
//   - an old copy nobody touched is removed: the name shows the keeper
//     with the same bytes and metadata, or the name was replaced or
//     removed by someone, which would have removed the old copy too;
//   - an old copy somebody touched is put back when the keeper is as the
//     exchange left it: whoever touched the copy found it by its name;
//   - when both were touched, neither can go back without moving what was
//     done to the other, so the name keeps the keeper and the old copy is
//     kept beside it under a visible name;
//   - a name that cannot be looked at (its file system shut down under the
//     step) leaves the step in the journal, for the recovery once it is
//     back.
func decide(s state) verdict {
	switch s.temp {
	case holdsNothing:
		return settled
	case holdsKeeper:
		return dropTemp
	case holdsOther:
		return leave
	case holdsUnknown:
		return unsure
	}
	switch {
	case s.name == holdsUnknown:
		return unsure
	case s.name == holdsTarget, s.targetClean:
		// The name holds the old copy too, or the old copy is as it was.
		return dropTemp
	case s.name == holdsKeeper && s.keeperClean:
		return undo
	}
	return keepBoth
}

// carryOut does what v says to the step's names in dfd and returns the
// name an old copy was kept under.
func carryOut(dfd int, in *Intent, v verdict) (kept string, err error) {
	switch v {
	case dropTemp:
		return "", unlinkAt(dfd, in.Temp)
	case undo:
		if err := unix.Renameat2(dfd, in.Temp, dfd, string(in.Name), unix.RENAME_EXCHANGE); err != nil {
			return "", fmt.Errorf("exchange back: %w", err)
		}
		if h := who(dfd, in.Temp, in); h != holdsKeeper {
			return "", fmt.Errorf("%w: after the exchange back, %s does not hold the keeper", ErrForeign, in.Temp)
		}
		return "", unlinkAt(dfd, in.Temp)
	case unsure:
		return "", errUnsure
	case keepBoth:
		kept = keptName(in)
		if err := unix.Renameat2(dfd, in.Temp, dfd, kept, unix.RENAME_NOREPLACE); err != nil {
			return "", fmt.Errorf("keep the old copy as %s: %w", kept, err)
		}
		return kept, nil
	}
	return "", nil
}

// keptName is the visible name an old copy is kept under: the name, the
// infix and a part of the step's id, shortened to fit a name's 255 bytes.
func keptName(in *Intent) string {
	suffix := keptInfix + in.ID[:min(8, len(in.ID))]
	name := string(in.Name)
	if len(name)+len(suffix) > 255 {
		name = name[:255-len(suffix)]
	}
	return name + suffix
}

func unlinkAt(dfd int, name string) error {
	if err := unix.Unlinkat(dfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unlink %s: %w", name, err)
	}
	return nil
}
