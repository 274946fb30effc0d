package dedup

import (
	"context"
	"fmt"
	"os"
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
	d.survey(ctx, groups, &p)
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
	s := survey{mode: p.Mode, probed: map[uint64]error{}}
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
	mode             Mode
	mu               sync.Mutex
	probed           map[uint64]error // device → nil or why it cannot share extents
	shared, noBlocks int
	unsupported      []*UnsupportedError
}

// group sets Frees to the bytes each target holds alone and, in reflink
// mode, drops the actions whose target shares the keeper's blocks already
// or has none.
func (s *survey) group(g *Group) {
	kf, _, err := openFile(g.Keeper.Path)
	if err != nil {
		return // the run finds out why, and says so
	}
	defer kf.Close()
	if s.mode == Reflink && s.cannot(g, kf) {
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
		if why != "" && s.mode == Reflink {
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
			s.unsupported = append(s.unsupported, unsupportedError(kf, g.Dev, g.Keeper.Path, err))
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
