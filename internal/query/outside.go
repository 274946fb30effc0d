package query

import (
	"context"
	"fmt"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/store"
)

// outsideState is what the last check found outside the roots.
type outsideState struct {
	dirs  []store.OutsideDir
	files int64
}

// maxOutsideLogged caps the directories named in the startup warning.
const maxOutsideLogged = 10

// outsideRoot reports whether p is outside every configured root.
func (x *Index) outsideRoot(p []byte) bool { return !x.cfg.Roots.Contains(string(p)) }

// CheckOutside finds the records outside the roots, in the background
// of the start, and warns once when there are any. The warning is logged
// before status shows the check as done, so a client that sees it done
// also finds it in the log.
func (x *Index) CheckOutside(ctx context.Context) {
	start := time.Now()
	err := x.refreshOutside(ctx, func(st *outsideState) {
		x.log.Debug("checked for records outside the roots", "places", len(st.dirs), "files", st.files,
			"took", time.Since(start).Round(time.Microsecond))
		x.warnOutside(st)
	})
	if err != nil && ctx.Err() == nil {
		x.log.Warn("cannot list the records outside the roots", "err", err)
	}
}

// warnOutside logs what st found, if anything.
func (x *Index) warnOutside(st *outsideState) {
	if len(st.dirs) == 0 {
		return
	}
	var named []string
	for i, d := range st.dirs {
		if i == maxOutsideLogged {
			named = append(named, fmt.Sprintf("… and %d more (annexctl status lists them)", len(st.dirs)-i))
			break
		}
		named = append(named, fmt.Sprintf("%s (%d files)", describeOutside(d), d.Files))
	}
	x.log.Warn("the index holds records outside the roots, left from runs with other roots; nothing checks them, so dups hides them and whereis marks them",
		"files", st.files, "dirs", named,
		"fix", "drop them with `annexctl forget DIR...` (--dry-run to see first), or start annexd with those directories as roots again")
}

func describeOutside(d store.OutsideDir) string {
	if d.Direct {
		return string(d.Dir) + " (its own files)"
	}
	return string(d.Dir)
}

// refreshOutside lists the records outside the roots and keeps the result
// for status and metrics, calling before (if not nil) just before it does.
// Runs are serialized, so a later run (after a forget) always has the last
// word.
func (x *Index) refreshOutside(ctx context.Context, before func(*outsideState)) error {
	x.outsideRun.Lock()
	defer x.outsideRun.Unlock()
	dirs, err := x.cfg.Store.Outside(ctx, x.rootBytes, true)
	if err != nil {
		return err
	}
	st := &outsideState{dirs: dirs}
	for _, d := range dirs {
		st.files += d.Files
	}
	if before != nil {
		before(st)
	}
	x.outside.Store(st)
	return nil
}

// outsideStatus is the status's view of the last check.
func (x *Index) outsideStatus() (list []api.OutsideRoot, checked bool) {
	st := x.outside.Load()
	if st == nil {
		return nil, false
	}
	for _, d := range st.dirs {
		list = append(list, api.OutsideRoot{Path: string(d.Dir), Direct: d.Direct, Dirs: d.Dirs, Files: d.Files})
	}
	return list, true
}

// Forget drops (or, with dry, counts) the records at or below dir that are
// outside the roots. The API server has checked that dir is absolute, clean
// and not at or below a root. Once asked to drop, it runs to the end even
// when the request is cancelled (a client that leaves half-way would
// otherwise leave some places dropped and the status still listing them)
// and always refreshes the list of places outside the roots.
func (x *Index) Forget(ctx context.Context, dir []byte, dry bool) (api.ForgetResult, error) {
	if !dry {
		ctx = context.WithoutCancel(ctx)
	}
	res := api.ForgetResult{Path: dir, DryRun: dry, Kept: x.cfg.Roots.Holding(string(dir))}
	var err error
	res.Files, err = x.cfg.Store.Forget(ctx, dir, x.rootBytes, dry)
	if dry {
		return res, err
	}
	if err == nil {
		x.log.Info("forgot records outside the roots", "dir", string(dir), "files", res.Files, "kept_roots", res.Kept)
	}
	if rerr := x.refreshOutside(ctx, nil); rerr != nil {
		x.log.Warn("cannot list the records outside the roots", "err", rerr)
	}
	x.cfg.Forgot() // the systemd status line counts the files
	return res, err
}
