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
		a.mu.Lock()
		defer a.mu.Unlock()
		if pass != 0 && e.Pass == pass {
			a.passCount(name[len(metaEntry):], c)
		}
		if _, filed := a.findings[path]; c.Problem() && !filed {
			a.findings[path] = e
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
	return a.write(ctx, store.Change{Op: store.OpPutMeta, Path: []byte(metaState), Value: b})
}

// write submits c and waits for it, also while the caller's ctx ends: a
// finding or a checkpoint is either written or its write fails.
func (a *Auditor) write(ctx context.Context, c store.Change) error {
	ch := make(chan error, 1)
	a.st.Submit(c, func(err error) { ch <- err })
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case err := <-ch:
		return err
	case <-t.C:
		return fmt.Errorf("audit: the index did not commit a write within a minute")
	}
}

// putEntry writes the entry of path.
func (a *Auditor) putEntry(ctx context.Context, path []byte, e entry) error {
	b, err := json.Marshal(&e)
	if err != nil {
		return err
	}
	if err := a.write(ctx, store.Change{Op: store.OpPutMeta, Path: []byte(metaEntry + string(path)), Value: b}); err != nil {
		return err
	}
	a.rememberEntry(string(path), &e)
	return nil
}

func (a *Auditor) deleteEntry(ctx context.Context, path string) error {
	if err := a.write(ctx, store.Change{Op: store.OpDeleteMeta, Path: []byte(metaEntry + path)}); err != nil {
		return err
	}
	a.forgetEntry(path)
	return nil
}

// getEntry reads the entry of path.
func (a *Auditor) getEntry(path string) (entry, bool) {
	v, ok, err := a.st.GetMeta(metaEntry + path)
	var e entry
	if err != nil || !ok || json.Unmarshal(v, &e) != nil {
		return entry{}, false
	}
	return e, true
}

// pruneEntries drops the hand-off entries (modified, missing) once their
// pass is complete, and the findings no record holds any more (an edit, or
// a heal by the indexer), and moves a finding whose file was renamed to
// the file's path now.
func (a *Auditor) pruneEntries(ctx context.Context) error {
	var drop []string
	err := a.st.MetaPrefix(ctx, metaEntry, func(name string, v []byte) error {
		var e entry
		if json.Unmarshal(v, &e) != nil { // an entry that does not decode is dropped
			drop = append(drop, name[len(metaEntry):])
			return nil
		}
		if c, _ := parseClass(e.Class); !c.Problem() {
			drop = append(drop, name[len(metaEntry):])
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range drop {
		if err := a.deleteEntry(ctx, p); err != nil {
			return err
		}
	}
	all := a.snapshot()
	stand, err := a.resolveAll(ctx)
	if err != nil {
		return err
	}
	for _, l := range stand {
		delete(all, l.at)
		if l.path != l.at || l.e.Ino == 0 {
			if err := a.rehome(ctx, l); err != nil {
				return err
			}
		}
	}
	for p := range all { // no record holds them
		if err := a.deleteEntry(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// rehome moves the finding l to the path of its file now, with its
// file's inode (an entry filed before inodes were kept gets it here).
func (a *Auditor) rehome(ctx context.Context, l listed) error {
	e := l.e
	if r, ok, err := a.st.Get([]byte(l.path)); err != nil {
		return err
	} else if ok {
		e.Dev, e.Ino = r.Dev, r.Ino
	}
	if err := a.putEntry(ctx, []byte(l.path), e); err != nil {
		return err
	}
	if l.path == l.at {
		return nil
	}
	a.mu.Lock()
	if c, ok := a.skip[l.at]; ok {
		delete(a.skip, l.at)
		a.skip[l.path] = c // its pass counted it under the old path
	}
	a.mu.Unlock()
	a.log.Info("an audit finding follows its file", "from", l.at, "path", l.path, "class", e.Class)
	return a.deleteEntry(ctx, l.at)
}
