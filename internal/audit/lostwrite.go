package audit

import (
	"encoding/json"
	"time"

	"github.com/annexd/annexd/store"
)

// whyLostWrite is the reason a lost write found by the indexer is filed
// with.
const whyLostWrite = "hashed again after an unclean shutdown: the disk holds other bytes under the same stat identity"

// LostWrite files a lost write the indexer found: after an unclean
// shutdown it hashed path again and found another digest under was's stat
// identity. now is the record of the bytes on disk, submitted before the
// call. The finding is listed, logged and sent to on_problem like the
// audit's own, until the user accepts it or the file changes. LostWrite
// does not wait for the index and works before Run.
func (a *Auditor) LostWrite(path []byte, was, now store.Record) {
	p := string(path)
	e := entry{Class: LostWrite.String(), Backend: was.Backend.String(), Recorded: was.Digest, Observed: now.Digest,
		Size: was.Size, HashedAt: now.HashedAt, Seen: time.Now().UnixNano(), Why: whyLostWrite}
	b, err := json.Marshal(&e)
	if err != nil {
		a.log.Warn("cannot record an audit finding", "path", p, "class", LostWrite.String(), "err", err)
		return
	}
	listed := a.filing(p)
	a.st.Submit(store.Change{Op: store.OpPutMeta, Path: []byte(metaEntry + p), Value: b}, func(err error) {
		// On the index's writer goroutine: count, log and queue only.
		a.filed(p)
		if err != nil {
			a.log.Warn("cannot record an audit finding", "path", p, "class", LostWrite.String(), "err", err)
			return
		}
		a.mu.Lock()
		a.totals[LostWrite]++
		if !listed {
			a.problems++
		}
		a.mu.Unlock()
		pr := a.problem(p, &e)
		a.log.Warn("audit found a problem", "class", LostWrite.String(), "path", p, "recorded", pr.RecordedKey,
			"observed", pr.ObservedKey, "why", whyLostWrite)
		a.note.send(pr)
	})
}

// filing notes that a lost write of path is being filed and reports
// whether path is listed already: by a committed entry, or by a report
// whose entry is not committed yet.
func (a *Auditor) filing(path string) bool {
	a.lostMu.Lock()
	defer a.lostMu.Unlock()
	listed := a.lostFiling[path] > 0
	if !listed {
		old, had := a.getEntry(path)
		oc, _ := parseClass(old.Class)
		listed = had && oc.Problem() && !a.stale(path, &old)
	}
	a.lostFiling[path]++
	return listed
}

// filed notes that a report of path has been committed or has failed.
func (a *Auditor) filed(path string) {
	a.lostMu.Lock()
	defer a.lostMu.Unlock()
	if a.lostFiling[path]--; a.lostFiling[path] <= 0 {
		delete(a.lostFiling, path)
	}
}
