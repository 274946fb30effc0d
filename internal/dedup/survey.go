package dedup

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/annexd/annexd/store"
)

// Plan plans a run from the index. Files the caller cannot read are left
// out before grouping, so a plan reveals nothing about them. Each action
// is then surveyed, reading only: Frees becomes the bytes the target holds
// alone. In reflink mode a target that already shares its keeper's blocks
// is dropped (counted in Plan.Shared), and a file system that cannot share
// extents is named in Plan.Unsupported. Hardlink mode keeps every target:
// linking merges the inodes even when it frees nothing.
func (d *Deduper) Plan(ctx context.Context, req Request) (Plan, error) {
	if req.Mode.journaled() && d.opt.Intents == nil {
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
	var groups []planned
	err := d.idx.Dups(ctx, store.DupOptions{MinSize: max(req.MinSize, 1)}, func(g store.Group) error {
		g.Members = vis.readable(g.Members)
		if pgs := PlanGroup(g, req.PlanOptions); len(pgs) > 0 {
			groups = append(groups, planned{g: g, pgs: pgs})
		}
		return nil
	})
	p := Plan{Mode: req.Mode}
	if err != nil {
		return p, err
	}
	d.survey(ctx, groups, &p, req.PlanOptions)
	for _, g := range groups {
		for _, pg := range g.pgs {
			if len(pg.Actions) > 0 {
				p.Add(pg)
			}
		}
	}
	return p, ctx.Err()
}

// planned is a duplicate group of the index and its plan.
type planned struct {
	g   store.Group
	pgs []Group
}

// survey surveys the planned groups on the run's workers and plans each
// again with what it found.
func (d *Deduper) survey(ctx context.Context, groups []planned, p *Plan, opt PlanOptions) {
	s := survey{d: d, opt: opt, probed: map[uint64]error{}}
	work := make(chan *planned)
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
	s.kept.Wait()
	p.Shared, p.NoBlocks, p.Unsupported = s.shared, s.noBlocks, s.unsupported
}

// survey is what the workers of one survey find, under its lock.
type survey struct {
	d                *Deduper
	opt              PlanOptions
	mu               sync.Mutex
	probed           map[uint64]error // device → nil or why it cannot share extents
	shared, noBlocks int
	unsupported      []*UnsupportedError
	kept             sync.WaitGroup // the surveys on their way to the index
}

// group surveys the inodes of a planned group (surveyFiles) and plans
// it again with the survey: each action's Frees becomes what its target
// holds alone. In reflink mode the keeper is the inode holding least
// alone, and a target that shares the keeper's blocks already or has
// none is dropped; a file system that cannot share extents is noted. A
// survey of every inode of the group is kept in the index.
func (s *survey) group(pl *planned) {
	files := plannedFiles(pl.pgs)
	sv, seen := surveyFiles(files, pl.g.Size)
	if int64(len(sv.Inodes)) == pl.g.Inodes && Keepable(&sv, pl.g) {
		s.d.keepSurvey(pl.g.Backend, pl.g.Digest, sv, seen, &s.kept)
	}
	pl.pgs = planGroup(pl.g, s.opt, &sv)
	for i := range pl.pgs {
		s.apply(&pl.pgs[i], &sv)
	}
}

// plannedFiles are the keepers and targets of a group's plans.
func plannedFiles(pgs []Group) []File {
	var out []File
	for _, pg := range pgs {
		out = append(out, pg.Keeper)
		for _, a := range pg.Actions {
			out = append(out, a.Targets...)
		}
	}
	return out
}

// apply sets each action's Frees from the survey and, in reflink mode,
// drops the actions with nothing to do.
func (s *survey) apply(g *Group, sv *store.Survey) {
	if s.opt.Mode == Reflink && s.cannot(g) {
		return
	}
	keeper := sv.Find(g.Dev, g.Keeper.Record.Ino)
	actions := g.Actions
	g.Actions, g.Frees = nil, 0
	for _, a := range actions {
		t := a.Targets[0].Record
		if i := sv.Find(t.Dev, t.Ino); i >= 0 {
			in := sv.Inodes[i]
			if why := nothingToFree(sv, i, keeper); why != "" && s.opt.Mode == Reflink {
				s.count(why)
				continue
			}
			a.Frees = in.Alone
		}
		g.Actions = append(g.Actions, a)
		g.Frees += a.Frees
	}
}

// nothingToFree says why making inode i of sv share the keeper's blocks
// frees nothing: SkipNoBlocks when it has no blocks, SkipShared when it
// shares all of them within the keeper's physical copy. Empty otherwise,
// also for an inode whose blocks are shared elsewhere: sharing the
// keeper's may free them once their other holders do too.
func nothingToFree(sv *store.Survey, i, keeper int) Reason {
	in := sv.Inodes[i]
	switch {
	case !in.Known || in.Alone > 0:
		return ""
	case in.Placed == 0:
		return SkipNoBlocks
	case keeper >= 0 && in.Copy == sv.Inodes[keeper].Copy:
		return SkipShared
	}
	return ""
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
func (s *survey) cannot(g *Group) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	err, seen := s.probed[g.Dev]
	if !seen {
		kf, _, oerr := openFile(g.Keeper.Path)
		if oerr != nil {
			return false // the run finds out why, and says so
		}
		defer kf.Close()
		err = canReflink(kf)
		s.probed[g.Dev] = err
		if err != nil {
			s.unsupported = append(s.unsupported, unsupportedError(kf, g.Dev, g.Keeper.Path, err))
		}
	}
	return err != nil
}
