package deduppart

import (
	"fmt"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/dedup"
)

// dedupRequest is the run an API request asks for: its mode, keep rule
// and paths (none: every root).
func dedupRequest(req api.DedupRequest, roots [][]byte) (dedup.Request, error) {
	dr := dedup.Request{
		PlanOptions: dedup.PlanOptions{Paths: req.Paths, MinSize: req.MinSize},
		Caller:      &dedup.Caller{UID: req.UID, GIDs: req.GIDs},
		DataHome:    req.DataHome,
	}
	switch {
	case req.Hardlink:
		dr.Mode = dedup.Hardlink
	case req.Trash:
		dr.Mode = dedup.Trash
	}
	if len(dr.Paths) == 0 {
		dr.Paths = roots
	}
	keep, err := dedup.ParseKeep(req.Keep)
	if err != nil {
		return dr, fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	dr.Keep = keep
	return dr, nil
}

// groupTrash is the trash folder a group's copies go to in trash mode.
func groupTrash(mode dedup.Mode, g dedup.Group, req api.DedupRequest) []byte {
	if mode != dedup.Trash || len(g.Actions) == 0 {
		return nil
	}
	dir := dedup.TrashDir(g.Actions[0].Targets[0].Path, &dedup.Caller{UID: req.UID, GIDs: req.GIDs}, req.DataHome)
	if dir == "" {
		return nil
	}
	return []byte(dir)
}
