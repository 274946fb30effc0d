package deduppart

import (
	"context"
	"time"

	"github.com/annexd/annexd/store"
)

// surveyEvery is how often the daemon looks for duplicate groups whose
// blocks it has not surveyed since they changed.
const surveyEvery = time.Minute

// RunSurveys keeps the surveys of block sharing complete, so that what
// the metrics call reclaimable covers every group: whenever the indexer
// is idle, it surveys each group the index keeps no survey of (after a
// scan, after a change to one of its files), pausing while the indexer
// works. It walks the groups again only once the index's figures moved
// since its last walk: a group whose survey the index refused (a file
// changed, its record not yet) waits for that change.
func (p *Part) RunSurveys(ctx context.Context) error {
	t := time.NewTicker(surveyEvery)
	defer t.Stop()
	var walked surveyState
	for {
		if p.ix.WaitIdle(ctx) != nil {
			return nil
		}
		if s, err := p.st.Stats(); err == nil && s.Surveyed < s.DupGroups && stateOf(s) != walked {
			start := time.Now()
			n, err := p.d.SurveyMissing(ctx, p.ix.WaitIdle)
			if err != nil && ctx.Err() == nil {
				p.log.Warn("surveying duplicate groups failed", "err", err)
			}
			p.log.Debug("surveyed duplicate groups", "groups", n, "took", time.Since(start).Round(time.Millisecond))
			if s, err := p.st.Stats(); err == nil {
				walked = stateOf(s)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// surveyState is what tells runSurveys that the groups changed.
type surveyState struct{ files, bytes, groups, duplicate, surveyed, reclaimable int64 }

func stateOf(s store.Stats) surveyState {
	return surveyState{s.Files, s.Bytes, s.DupGroups, s.Duplicate, s.Surveyed, s.Reclaimable}
}
