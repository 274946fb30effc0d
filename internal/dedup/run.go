package dedup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
)

// Plan plans a run from the index. Files the caller cannot read are left
// out before grouping, so a plan reveals nothing about them. In reflink
// mode each action is then surveyed, reading only: a target that already
// shares its keeper's blocks is dropped (counted in Plan.Shared), Frees
// becomes the bytes the target holds alone, and a file system that cannot
// share extents is named in Plan.Unsupported.
func (d *Deduper) Plan(ctx context.Context, req Request) (Plan, error) {
	if req.Mode == Hardlink && d.opt.Intents == nil {
		return Plan{}, ErrNoIntents
	}
	paths := make([][]byte, len(req.Paths))
	for i, p := range req.Paths {
		if len(p) == 0 || p[0] != '/' {
			return Plan{}, fmt.Errorf("%w: %q is not absolute", ErrPath, p)
		}
		paths[i] = []byte(filepath.Clean(string(p)))
	}
	req.Paths = paths
	vis := newAccess(req.Caller)
	var groups []Group
	err := d.idx.Dups(ctx, store.DupOptions{MinSize: max(req.MinSize, 1)}, func(g store.Group) error {
		g.Members = vis.readable(g.Members)
		groups = append(groups, PlanGroup(g, req.PlanOptions)...)
		return nil
	})
	p := Plan{Mode: req.Mode}
	if err != nil {
		return p, err
	}
	if req.Mode == Reflink {
		d.survey(ctx, groups, &p)
	}
	for _, g := range groups {
		if len(g.Actions) > 0 {
			p.Add(g)
		}
	}
	return p, ctx.Err()
}

// survey reads the extent maps of a reflink plan's groups, on the run's
// workers, and rewrites each group with what it found.
func (d *Deduper) survey(ctx context.Context, groups []Group, p *Plan) {
	s := survey{probed: map[uint64]error{}}
	work := make(chan *Group)
	var wg sync.WaitGroup
	for range d.workers() {
		wg.Go(func() {
			for g := range work {
				s.group(g)
			}
		})
	}
	for i := range groups {
		if ctx.Err() != nil {
			break
		}
		work <- &groups[i]
	}
	close(work)
	wg.Wait()
	p.Shared, p.NoBlocks, p.Unsupported = s.shared, s.noBlocks, s.unsupported
}

// survey is what the workers of one survey find, under its lock.
type survey struct {
	mu               sync.Mutex
	probed           map[uint64]error // device → nil or why it cannot share extents
	shared, noBlocks int
	unsupported      []*UnsupportedError
}

// group drops the actions whose target already shares the keeper's
// blocks or has none, and sets Frees to the bytes each target holds alone.
func (s *survey) group(g *Group) {
	kf, _, err := openFile(g.Keeper.Path)
	if err != nil {
		return // the run finds out why, and says so
	}
	defer kf.Close()
	if s.cannot(g, kf) {
		return
	}
	kx, err := fiemap(int(kf.Fd()), g.Size)
	if err != nil {
		return
	}
	actions := g.Actions
	g.Actions, g.Frees = nil, 0
	for _, a := range actions {
		frees, why := surveyTarget(a.Targets[0].Path, g.Size, kx)
		if why != "" {
			s.count(why)
			continue
		}
		if frees >= 0 {
			a.Frees = frees
		}
		g.Actions = append(g.Actions, a)
		g.Frees += a.Frees
	}
}

func (s *survey) count(why Reason) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if why == SkipShared {
		s.shared++
	} else {
		s.noBlocks++
	}
}

// cannot probes the keeper's file system once per device and notes one
// that cannot share extents.
func (s *survey) cannot(g *Group, kf *os.File) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	err, seen := s.probed[g.Dev]
	if !seen {
		err = canReflink(kf)
		s.probed[g.Dev] = err
		if err != nil {
			s.unsupported = append(s.unsupported, unsupportedError(kf, g.Keeper.Path, err))
		}
	}
	return err != nil
}

// surveyTarget returns the bytes the target holds alone (-1: unknown),
// and SkipShared when it already shares all its blocks with the keeper or
// SkipNoBlocks when it has none of its own.
func surveyTarget(path []byte, size int64, kx []extent) (frees int64, why Reason) {
	f, _, err := openFile(path)
	if err != nil {
		return -1, ""
	}
	defer f.Close()
	tx, err := fiemap(int(f.Fd()), size)
	if err != nil {
		return -1, ""
	}
	same, exclusive := sharing(tx, kx)
	switch all := placed(tx); {
	case all == 0:
		return 0, SkipNoBlocks
	case same == all:
		return 0, SkipShared
	}
	return exclusive, ""
}

// Apply carries out a plan. Every action first checks both files against
// their records again and is skipped, alone, when they differ. Apply
// returns the result so far and ctx.Err() when ctx ends; otherwise an
// *UnsupportedError for each file system that could not share extents.
// Runs that change files take turns.
func (d *Deduper) Apply(ctx context.Context, plan Plan, req Request) (Result, error) {
	if plan.Mode == Hardlink && d.opt.Intents == nil {
		return Result{}, ErrNoIntents
	}
	if err := d.lock(ctx); err != nil {
		return Result{}, err
	}
	defer d.unlock()
	if plan.Mode == Hardlink {
		// A file in the way was reported when found; it stops nothing.
		if err := d.recover(ctx); err != nil && !onlyForeign(err) {
			return Result{}, err
		}
	}
	out := &outcome{probed: map[uint64]error{}, res: Result{Mode: plan.Mode, Planned: plan.Actions}}
	r := run{d: d, req: req, mode: plan.Mode, access: newAccess(req.Caller), out: out}
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
	if err := ctx.Err(); err != nil {
		return out.res, err
	}
	var errs []error
	for _, u := range out.res.Unsupported {
		errs = append(errs, u)
	}
	return out.res, errors.Join(errs...)
}

// onlyForeign reports whether every error joined in err is ErrForeign.
func onlyForeign(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if e != nil && !onlyForeign(e) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, ErrForeign)
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
	out    *outcome // shared by the workers
	stale  [][]byte // hardlink: names to hash again after the group
}

// outcome is what the workers of one Apply find, under its lock.
type outcome struct {
	mu     sync.Mutex
	res    Result
	done   int
	probed map[uint64]error // device → nil, or why it cannot share extents
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
	keeper := &side{path: g.Keeper.Path, rec: g.Keeper.Record}
	reason, err := r.openSide(keeper)
	if err == nil && reason == "" && r.mode == Reflink {
		reason, err = r.supported(g, keeper)
	}
	defer keeper.close()
	defer r.rehashStale()
	for _, a := range g.Actions {
		if ctx.Err() != nil {
			return
		}
		if reason != "" {
			r.skipAction(g, a, reason, err)
			continue
		}
		r.action(ctx, g, keeper, a)
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
			r.out.res.Unsupported = append(r.out.res.Unsupported, unsupportedError(keeper.f, keeper.path, err))
		}
	}
	if err != nil {
		return SkipUnsupported, err
	}
	return "", nil
}

// action checks and carries out one action.
func (r *run) action(ctx context.Context, g *Group, keeper *side, a Action) {
	var freed int64
	reason, err := r.recheck(keeper)
	if reason == "" {
		switch r.mode {
		case Hardlink:
			freed, reason, err = r.hardlink(ctx, g, keeper, a)
		default:
			freed, reason, err = r.reflinkAction(ctx, keeper, a.Targets[0])
		}
	}
	if reason != "" {
		r.skipAction(g, a, reason, err)
		return
	}
	r.out.mu.Lock()
	defer r.out.mu.Unlock()
	r.out.res.Done++
	r.out.res.Freed += freed
	r.progress(a)
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
		return skipFor(err), err
	}
	s.f, s.st, s.fi = f, st, fsstat.FromStat(&st)
	return r.check(s)
}

// recheck checks an open file against its record again.
func (r *run) recheck(s *side) (Reason, error) {
	if err := unix.Fstat(int(s.f.Fd()), &s.st); err != nil {
		return SkipError, err
	}
	s.fi = fsstat.FromStat(&s.st)
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

// skipAction records a skipped action, once for each of its names.
func (r *run) skipAction(g *Group, a Action, reason Reason, err error) {
	detail := ""
	if err != nil {
		detail = err.Error()
	}
	r.d.log.Debug("dedup skipped", "keeper", string(g.Keeper.Path), "target", string(a.Targets[0].Path),
		"reason", string(reason), "err", err)
	r.out.mu.Lock()
	defer r.out.mu.Unlock()
	r.out.res.skip(Skip{Keeper: g.Keeper.Path, Target: a.Targets[0].Path, Reason: reason, Detail: detail})
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
	if r.d.opt.Rehash == nil {
		return
	}
	for _, p := range paths {
		r.d.opt.Rehash(p)
	}
}
