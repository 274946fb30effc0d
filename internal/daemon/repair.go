package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/annexd/annexd/store"
)

// Repaired is what Repair did.
type Repaired struct {
	// Aside is where the old index is now; empty when there was none.
	Aside string
	// KeptCalibration: the old index's hashing calibration was still
	// readable, was copied into the new one, and held: the rebuild used it
	// instead of calibrating again.
	KeptCalibration bool
	// Files is the number of files in the new index; Took the time the
	// rebuild took.
	Files int64
	Took  time.Duration
	// Done: the new index is complete. It is false when ctx ended first;
	// the next start of annexd then finishes the first scan.
	Done bool
}

// Repair moves the index aside, never deleting it, and builds a new one
// from the files under the roots, as a first start does; it keeps the old
// index's calibration when that is still readable. It returns once the
// new index is complete, or ctx ended.
func (a *App) Repair(ctx context.Context) (Repaired, error) {
	var r Repaired
	aside, err := store.MoveAside(a.cfg.Index, []string{calibrationMeta})
	if err != nil {
		return r, err
	}
	r.Aside = aside.Path
	a.log.Info("rebuilding the index from the files", "index", a.cfg.Index, "old_index", r.Aside,
		"calibration_copied", slices.Contains(aside.Kept, calibrationMeta), "roots", a.cfg.Roots)
	a.opts.ExitWhenIdle = true
	start := time.Now()
	err = a.Run(ctx)
	r.KeptCalibration = slices.Contains(aside.Kept, calibrationMeta) && a.calibReused.Load()
	if err != nil && !errors.Is(err, context.Canceled) {
		return r, err
	}
	r.Took, r.Done = time.Since(start), ctx.Err() == nil
	st, err := store.Open(a.cfg.Index, store.Options{ReadOnly: true})
	if err != nil {
		return r, fmt.Errorf("daemon: the new index: %w", err)
	}
	defer st.Close()
	s, err := st.Stats()
	r.Files = s.Files
	return r, err
}
