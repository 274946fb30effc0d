package daemon

import (
	"fmt"
	"syscall"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/dedup"
)

// testDedupKillEnv, when set to a step of a move to the trash
// ("trash-info"), makes the daemon SIGKILL itself right after the first
// such step: a seam for the end-to-end tests of recovery.
const testDedupKillEnv = "ANNEXD_TEST_DEDUP_KILL"

// killAtStep is dedup.Options.AtStep for testDedupKillEnv; nil unset.
func killAtStep(step string) func(string) {
	if step == "" {
		return nil
	}
	return func(s string) {
		if s == step {
			syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
		}
	}
}

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
