package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/annexd/annexd/store"
)

// Meta names of the audit's state in the index.
const (
	metaState = "audit/state"
	// metaEntry + path names what a pass found for a file that was not ok:
	// a problem until it is accepted or its file changes (findings.go), or
	// a hand-off to the indexer (modified, missing), kept until the pass
	// completes so that a restarted pass neither reads nor counts the file
	// again.
	metaEntry = "audit/p/"
)

// persisted is the audit's state in the index's meta bucket. It is saved
// when a plan changes and every checkpointEvery while a run goes on.
type persisted struct {
	Paused  bool         `json:"paused,omitempty"`
	Passes  uint64       `json:"passes"`             // passes begun
	Runs    uint64       `json:"runs,omitempty"`     // the last run id handed out
	Pass    *passState   `json:"pass,omitempty"`     // the pass in progress
	Last    *PassSummary `json:"last,omitempty"`     // the last completed pass
	NextRun int64        `json:"next_run,omitempty"` // a scheduled run stopped early goes on no earlier
}

// passState is a pass in progress. Its records are those checked before
// Cutoff; one it verifies moves past Cutoff, one it finds not ok gets an
// entry, so nothing but Cutoff says where the pass is.
type passState struct {
	ID     uint64 `json:"id"`
	Cutoff int64  `json:"cutoff"`
	Began  int64  `json:"began"`
	Files  int64  `json:"files"` // in the pass when it began
	Bytes  int64  `json:"bytes"`
	// OK and OKBytes count the verifications up to the one with
	// VerifiedAt At. Verifications get increasing VerifiedAt times and are
	// committed in that order, so after a crash the ones not counted yet
	// are exactly the records verified after At.
	OK      int64 `json:"ok"`
	OKBytes int64 `json:"ok_bytes"`
	At      int64 `json:"at"`
}

// PassSummary is a completed pass.
type PassSummary struct {
	ID     uint64           `json:"id"`
	Began  int64            `json:"began"` // Unix ns
	Ended  int64            `json:"ended"`
	Cutoff int64            `json:"cutoff"`
	Files  int64            `json:"files"` // in the pass when it began
	Bytes  int64            `json:"bytes"`
	Counts map[string]int64 `json:"counts"` // by class
	// OKBytes are the bytes verified ok; Cover the coverage when the pass
	// completed (nil in a pass completed before they were kept).
	OKBytes int64         `json:"ok_bytes,omitempty"`
	Cover   *PassCoverage `json:"cover,omitempty"`
	// Left are the files the pass gave up on (nil: none); they are due in
	// the next.
	Left *Left `json:"left,omitempty"`
	// Unread are the files of the pass it did not read (unread).
	Unread int64 `json:"unread,omitempty"`
}

// unread counts the files of pass s that it neither verified, nor
// decided, nor left: the indexer hashed them again after the pass began
// (an edit, the re-verification of the records hashed just
// before an unclean end, which confirms their keys), or they were
// removed. Their records' checked time is past the cutoff, so the pass
// does not read them; they are told apart from the files the pass read
// by difference, Files being counted when it began. A hash begun before
// the cutoff and written after it is in the pass and not in Files: the
// count stops at 0, and is then too low. A file renamed during the pass
// is no finding at its old name (recorder.handOver), so it counts once.
func unread(s *PassSummary) int64 {
	n := s.Files
	for _, v := range s.Counts {
		n -= v
	}
	if s.Left != nil {
		n -= s.Left.Files
	}
	return max(n, 0)
}

// entry is what metaEntry + path holds.
type entry struct {
	Pass     uint64 `json:"pass"` // the pass it counts in; 0 for none
	Class    string `json:"class"`
	Backend  string `json:"backend,omitempty"`
	Recorded []byte `json:"recorded,omitempty"` // digest of the record judged
	Observed []byte `json:"observed,omitempty"` // digest read, when read
	Size     int64  `json:"size"`
	// HashedAt is that of the record standing for the finding.
	HashedAt int64 `json:"hashed_at"`
	// Dev and Ino are the file's, so the finding follows it when it is
	// renamed (0: an entry from before they were kept).
	Dev   uint64 `json:"dev,omitempty"`
	Ino   uint64 `json:"ino,omitempty"`
	Seen  int64  `json:"seen"`
	Why   string `json:"why,omitempty"`
	Prior string `json:"prior,omitempty"` // unreadable: the class of the finding it replaced
}

// checkpointEvery is how often a run saves its counts.
const checkpointEvery = 10 * time.Second

// load reads the state, the entries of the pass in progress, and the
// verifications a crash kept from being counted.
func (a *Auditor) load(ctx context.Context) error {
	var s persisted
	v, ok, err := a.st.GetMeta(metaState)
	if err != nil {
		return fmt.Errorf("audit: read state: %w", err)
	}
	if ok {
		if err := json.Unmarshal(v, &s); err != nil {
			a.log.Warn("audit state unreadable, starting afresh", "err", err)
			s = persisted{}
		}
	}
	a.mu.Lock()
	a.state = s
	a.nextID = max(a.nextID, s.Runs)
	a.passCounts = map[Class]int64{}
	a.skip = map[string]Class{}
	a.mu.Unlock()
	if err := a.loadEntries(ctx); err != nil {
		return err
	}
	return a.recount(ctx)
}

// loadEntries counts the entries of the pass in progress and keeps the
// findings in memory, beside those filed since the start (LostWrite,
// Found, which work before Run).
func (a *Auditor) loadEntries(ctx context.Context) error {
	var pass uint64
	a.mu.Lock()
	if a.state.Pass != nil {
		pass = a.state.Pass.ID
	}
	a.mu.Unlock()
	err := a.st.MetaPrefix(ctx, metaEntry, func(name string, v []byte) error {
		var e entry
		if json.Unmarshal(v, &e) != nil {
			return nil
		}
		c, _ := parseClass(e.Class)
		path := name[len(metaEntry):]
		if pass != 0 && e.Pass == pass {
			a.mu.Lock()
			a.passCount(path, c)
			a.mu.Unlock()
		}
		if c.Problem() {
			a.fileLoaded(path, e)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit: read findings: %w", err)
	}
	return nil
}

// recount adds the verifications committed after the last checkpoint: the
// records verified by an audit (VerifiedAt after HashedAt) after At.
func (a *Auditor) recount(ctx context.Context) error {
	a.mu.Lock()
	p := a.state.Pass
	var at int64
	if p != nil {
		at = p.At
	}
	a.mu.Unlock()
	if p == nil {
		return nil
	}
	var n, bytes int64
	last := at
	err := a.st.ByChecked(ctx, store.CheckedFrom(at+1), math.MaxInt64, func(d store.Due) error {
		r := &d.Record
		if r.VerifiedAt > at && r.VerifiedAt > r.HashedAt {
			n++
			bytes += r.Size
			last = max(last, r.VerifiedAt)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit: recount: %w", err)
	}
	a.mu.Lock()
	p.OK += n
	p.OKBytes += bytes
	p.At = last
	a.lastVer = max(a.lastVer, last)
	a.mu.Unlock()
	if n > 0 {
		a.log.Info("audit pass resumed after an interruption", "pass", p.ID, "verified_since_checkpoint", n)
	}
	return nil
}

// saveState writes the state. It is called outside a.mu.
func (a *Auditor) saveState(ctx context.Context) error {
	a.mu.Lock()
	b, err := json.Marshal(&a.state)
	a.mu.Unlock()
	if err != nil {
		return err
	}
	return commit(a.st, store.Change{Op: store.OpPutMeta, Path: []byte(metaState), Value: b})
}
