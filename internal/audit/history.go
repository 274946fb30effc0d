package audit

import (
	"encoding/json"
	"fmt"

	"github.com/annexd/annexd/store"
)

// The history is the passes completed, kept in the index's meta apart
// from the state (which is saved every checkpoint): the last historyLen
// of them, oldest first. A pass is written there when it completes,
// before the state says so: a crash between the two completes the same
// pass again, and its entry replaces the first by id. An index from
// before the history has only the last pass: it seeds the history.
const (
	metaHistory = "audit/history"
	historyLen  = 100
)

// PassCoverage is the coverage of the schedule when a pass completed
// (Coverage then).
type PassCoverage struct {
	Every      int64 `json:"every"` // the schedule's interval, ns
	Files      int64 `json:"files"` // records checked within Every
	Bytes      int64 `json:"bytes"`
	Total      int64 `json:"total"` // records an audit re-reads
	TotalBytes int64 `json:"total_bytes"`
}

// Problems counts the findings of the pass that are problems (corrupt,
// untraced, unreadable, lost write).
func (s *PassSummary) Problems() int64 {
	var n int64
	for name, v := range s.Counts {
		if c, ok := parseClass(name); ok && c.Problem() {
			n += v
		}
	}
	return n
}

// History returns the passes completed, oldest first: the last 100.
func (a *Auditor) History() ([]PassSummary, error) {
	h, err := a.readHistory()
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	last := a.state.Last
	a.mu.Unlock()
	return withPass(h, last), nil
}

// readHistory reads the history as stored.
func (a *Auditor) readHistory() ([]PassSummary, error) {
	v, ok, err := a.st.GetMeta(metaHistory)
	if err != nil {
		return nil, fmt.Errorf("audit: read the pass history: %w", err)
	}
	var h []PassSummary
	if ok {
		if err := json.Unmarshal(v, &h); err != nil {
			a.log.Warn("audit pass history unreadable, starting it afresh", "err", err)
			h = nil
		}
	}
	return h, nil
}

// recordPass adds pass s to the history; prev is the last pass before
// it, which seeds a history not kept yet.
func (a *Auditor) recordPass(s, prev *PassSummary) error {
	h, err := a.readHistory()
	if err != nil {
		return err
	}
	h = withPass(withPass(h, prev), s)
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return commit(a.st, store.Change{Op: store.OpPutMeta, Path: []byte(metaHistory), Value: b})
}

// withPass returns h with s last (nil: h as it is), in place of an
// entry of the same id, cut to the last historyLen.
func withPass(h []PassSummary, s *PassSummary) []PassSummary {
	if s == nil {
		return h
	}
	out := make([]PassSummary, 0, len(h)+1)
	for _, p := range h {
		if p.ID != s.ID {
			out = append(out, p)
		}
	}
	out = append(out, *s)
	return out[max(0, len(out)-historyLen):]
}
