package dedup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
)

// Apply carries out a plan. Every action first checks both files against
// their records again and is skipped, alone, when they differ. Apply
// returns the result so far and ctx.Err() when ctx ends; otherwise an
// *UnsupportedError for each file system that could not share extents.
// Runs that change files take turns.
func (d *Deduper) Apply(ctx context.Context, plan Plan, req Request) (Result, error) {
	if plan.Mode.journaled() && d.opt.Intents == nil {
		return Result{}, ErrNoIntents
	}
	if err := d.lock(ctx); err != nil {
		return Result{}, err
	}
	defer d.unlock()
	out := &tally{probed: map[uint64]error{}, res: Result{Mode: plan.Mode, Planned: plan.Actions}}
	r := run{d: d, req: req, mode: plan.Mode, access: newAccess(req.Caller), out: out}
	if plan.Mode.journaled() {
		// A step left open is reported and tried again; it stops no
		// other pair.
		if err := d.recover(ctx); err != nil {
			d.log.Warn("dedup recovery incomplete", "err", err)
		}
		r.pending = d.pendingTemps()
	}
	work := make(chan *Group)
	var wg sync.WaitGroup
	for range d.workers() {
		wg.Go(func() {
			for g := range work {
				gr := r // each group its own stale list
				gr.group(ctx, g)
			}
		})
	}
feed:
	for i := range plan.Groups {
		select {
		case work <- &plan.Groups[i]:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	out.kept.Wait()
	if err := ctx.Err(); err != nil {
		return out.res, err
	}
	var errs []error
	for _, u := range out.res.Unsupported {
		errs = append(errs, u)
	}
	return out.res, errors.Join(errs...)
}

// pendingTemps are the temporary names of the steps recovery left open.
func (d *Deduper) pendingTemps() [][]byte {
	ins, err := d.opt.Intents.Intents()
	if err != nil {
		return nil
	}
	var out [][]byte
	for _, in := range ins {
		if in.Trash == nil {
			out = append(out, []byte(filepath.Join(string(in.Dir), in.Temp)))
		}
	}
	return out
}

// workers is how many groups a run works on at once.
func (d *Deduper) workers() int {
	if d.opt.Workers > 0 {
		return d.opt.Workers
	}
	return 4
}

// lock waits for the turn to change files, or for ctx to end.
func (d *Deduper) lock(ctx context.Context) error {
	select {
	case d.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *Deduper) unlock() { <-d.turn }

// run is the state of one Apply, as one group's worker sees it.
type run struct {
	d      *Deduper
	req    Request
	mode   Mode
	access *access
	out    *tally   // shared by the workers
	stale  [][]byte // hardlink: names to hash again after the group
	// pending are the temporary names of steps left for recovery
	// (hardlink): a keeper's link there is one the run knows.
	pending [][]byte
}

// tally is what the workers of one Apply find, under its lock.
type tally struct {
	mu     sync.Mutex
	res    Result
	done   int
	probed map[uint64]error // device → nil, or why it cannot share extents
	kept   sync.WaitGroup   // the groups' new surveys on their way to the index
}

// side is one file of a pair, open for reading.
type side struct {
	path []byte
	rec  store.Record
	f    *os.File
	st   unix.Stat_t
	fi   fsstat.FileInfo // of st
	// linked is the ctime the keeper got from this run's last link to it,
	// or 0. A link changes only the inode's ctime and link count, so that
	// ctime is as good as the record's.
	linked int64
	// names are the keeper's names the run knows (hardlink mode): those in
	// the index, and the copies' names it linked to it; links is the
	// number of its links the run knows of, names and steps left open.
	names [][]byte
	links uint64
}

// current reports whether the file and the index's record cur still are
// what the plan saw, allowing for the ctime of this run's own links.
func (s *side) current(cur *store.Record) bool {
	if sameRecord(cur, &s.rec) && matches(s.fi, &s.rec) {
		return true
	}
	if s.linked == 0 || s.fi.CtimeNs != s.linked {
		return false
	}
	want := s.rec
	want.CtimeNs = s.linked
	if !matches(s.fi, &want) {
		return false
	}
	// The index may have recorded the new ctime meanwhile.
	return sameRecord(cur, &s.rec) || sameContent(cur, &want)
}

func (s *side) close() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// pair is a keeper and one target name, both open and checked.
type pair struct {
	keeper, target *side
}

// group carries out one group's actions with its keeper opened once.
func (r *run) group(ctx context.Context, g *Group) {
	keeper := &side{path: g.Keeper.Path, rec: g.Keeper.Record, names: slices.Clone(g.KeeperNames)}
	reason, err := r.openSide(keeper)
	if err == nil && reason == "" && r.mode == Reflink {
		reason, err = r.supported(g, keeper)
	}
	defer keeper.close()
	defer r.rehashStale()
	done := 0
	defer func() {
		if done > 0 && r.mode == Reflink {
			r.d.Resurvey(g.Backend, g.Digest, &r.out.kept) // its files share other blocks now
		}
	}()
	for _, a := range g.Actions {
		if ctx.Err() != nil {
			return
		}
		if reason != "" {
			r.skipAction(g, a, reason, err, 0)
			continue
		}
		if r.action(ctx, g, keeper, a) {
			done++
		}
	}
}

// supported probes a device once per run.
func (r *run) supported(g *Group, keeper *side) (Reason, error) {
	r.out.mu.Lock()
	defer r.out.mu.Unlock()
	err, seen := r.out.probed[g.Dev]
	if !seen {
		err = canReflink(keeper.f)
		r.out.probed[g.Dev] = err
		if err != nil {
			r.out.res.Unsupported = append(r.out.res.Unsupported, unsupportedError(keeper.f, g.Dev, keeper.path, err))
		}
	}
	if err != nil {
		return SkipUnsupported, err
	}
	return "", nil
}

// action checks and carries out one action; it reports whether it was
// done.
func (r *run) action(ctx context.Context, g *Group, keeper *side, a Action) bool {
	var freed int64
	reason, err := r.recheck(keeper)
	if reason == "" {
		switch r.mode {
		case Hardlink:
			freed, reason, err = r.hardlink(ctx, g, keeper, a)
		case Trash:
			freed, reason, err = r.trashCopy(ctx, keeper, a)
		default:
			freed, reason, err = r.reflinkAction(ctx, keeper, a.Targets[0])
		}
	}
	if reason != "" {
		r.skipAction(g, a, reason, err, freed)
		return false
	}
	r.out.mu.Lock()
	defer r.out.mu.Unlock()
	r.out.res.Done++
	r.out.res.Freed += freed
	r.progress(a)
	return true
}

// reflinkAction opens and checks a target, then shares the keeper's extents.
func (r *run) reflinkAction(ctx context.Context, keeper *side, t File) (int64, Reason, error) {
	target := &side{path: t.Path, rec: t.Record}
	defer target.close()
	if reason, err := r.openSide(target); reason != "" {
		return 0, reason, err
	}
	if !r.access.canModify(target.path, &target.st) {
		return 0, SkipPermission, nil
	}
	freed, reason, err := r.reflink(ctx, &pair{keeper: keeper, target: target})
	if reason == SkipDiffers {
		r.rehash(keeper.path, target.path)
	}
	return freed, reason, err
}

// openSide opens a file and checks it against its record.
func (r *run) openSide(s *side) (Reason, error) {
	f, st, err := openFile(s.path)
	if err != nil {
		return skipFor(err, s.path, s.rec.Dev), err
	}
	s.f, s.st, s.fi = f, st, fsstat.FromFstat(int(f.Fd()), &st)
	return r.check(s)
}

// recheck checks an open file against its record again.
func (r *run) recheck(s *side) (Reason, error) {
	if err := unix.Fstat(int(s.f.Fd()), &s.st); err != nil {
		return SkipError, err
	}
	s.fi = fsstat.FromFstat(int(s.f.Fd()), &s.st)
	return r.check(s)
}

// check compares an open file with its record, in the index and on disk,
// and asks the ledger whether it was written since the record was hashed.
func (r *run) check(s *side) (Reason, error) {
	cur, ok, err := r.d.idx.Get(s.path)
	if err != nil {
		return SkipError, err
	}
	if !ok || !s.current(&cur) {
		return SkipChanged, nil
	}
	if l := r.d.opt.Ledger; l != nil && l.WrittenSince(string(s.path), s.rec.Dev, s.rec.Ino, s.rec.HashedAt) {
		return SkipWritten, nil
	}
	return "", nil
}

// skipAction records a skipped action, once for each of its names, and
// the bytes it freed before it stopped (a copy shared in part).
func (r *run) skipAction(g *Group, a Action, reason Reason, err error, freed int64) {
	detail := ""
	if err != nil {
		detail = err.Error()
	}
	r.d.log.Debug("dedup skipped", "keeper", string(g.Keeper.Path), "target", string(a.Targets[0].Path),
		"reason", string(reason), "err", err)
	r.out.mu.Lock()
	defer r.out.mu.Unlock()
	r.out.res.Freed += freed
	r.out.res.skip(Skip{Keeper: g.Keeper.Path, Target: a.Targets[0].Path, Reason: reason, Detail: detail, Freed: freed})
	r.progress(a)
}

// progress counts a finished action and reports it; r.out.mu is held.
func (r *run) progress(a Action) {
	r.out.done++
	if r.req.Progress != nil {
		res := &r.out.res
		r.req.Progress(Progress{Done: r.out.done, Total: res.Planned, Freed: res.Freed, Path: a.Targets[0].Path})
	}
}

func (r *run) rehashStale() {
	r.rehash(r.stale...)
	r.stale = r.stale[:0]
}

func (r *run) rehash(paths ...[]byte) {
	if r.d.opt.Indexer == nil {
		return
	}
	for _, p := range paths {
		r.d.opt.Indexer.Rehash(string(p))
	}
}
