package audit

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/annexd/annexd/store"
)

// The reasons the indexer's findings are filed with.
const (
	whyLostWrite = "hashed again after an unclean shutdown: the disk holds other bytes under the same stat identity"
	whyCorrupt   = "hashed again: other bytes under the recorded stat identity, ctime included, and no write seen"
	whyUntraced  = "hashed again: other bytes, only the ctime moved (a chmod, chown, link, or a write with the mtime set back) and no write was seen"
)

// Report is what the indexer found when it hashed a file again: its bytes
// changed with no witness of a write.
type Report struct {
	Path string
	// From is where Was is recorded: Path, or another name of the file's
	// inode (a hard link, or a name it was renamed from).
	From string
	// Class is LostWrite, Corrupt or Untraced.
	Class Class
	// Was is the record the file had; Now the one written for Path: the
	// bytes on disk for a lost write, else Was's key kept, flagged.
	Was, Now store.Record
	// Observed is the digest hashed.
	Observed []byte
}

// Found files a finding of the indexer, whose record was submitted first.
// It is listed, logged and sent to on_problem like the audit's own, until
// the user accepts it or the file changes. A file that has a finding
// already keeps it (an unreadable one now readable takes the class it
// stands for); a new name of a flagged inode takes its finding's class.
// Found does not wait for the index and works before Run.
func (a *Auditor) Found(r Report) {
	e := entry{Class: r.Class.String(), Backend: r.Was.Backend.String(), Recorded: r.Was.Digest, Observed: r.Observed,
		Size: r.Was.Size, HashedAt: r.Now.HashedAt, Dev: r.Now.Dev, Ino: r.Now.Ino, Seen: time.Now().UnixNano()}
	switch r.Class {
	case LostWrite:
		e.Why = whyLostWrite
	case Corrupt, Untraced:
		cur, standing := a.findingOf(r.Path, &r.Now)
		if standing && cur.Class == Unreadable.String() { // readable now
			e.Class = r.Class.String()
			if c := cur.standsFor(); c.keyKept() {
				e.Class = c.String()
			}
			e.Pass, e.Seen = cur.Pass, cur.Seen
			a.classRecord(r.Path, r.Now, e.Class)
			a.submitEntry(r.Path, e, false)
			return
		}
		if standing {
			a.classRecord(r.Path, r.Now, cur.standsFor().String())
			return // its finding stands
		}
		if old, ok := a.findingOf(r.From, &r.Was); ok && r.From != r.Path && old.standsFor().keyKept() {
			e.Class = old.standsFor().String()
		}
		e.Why = whyCorrupt
		if c, _ := parseClass(e.Class); c == Untraced {
			e.Why = whyUntraced
		}
		a.classRecord(r.Path, r.Now, e.Class)
	default:
		a.log.Warn("an unknown finding of the indexer", "path", r.Path, "class", r.Class.String())
		return
	}
	a.submitEntry(r.Path, e, true)
}

// submitEntry files the entry of path without waiting for the index;
// once committed it is counted and, when news, logged and notified.
func (a *Auditor) submitEntry(path string, e entry, news bool) {
	c, _ := parseClass(e.Class)
	b, err := json.Marshal(&e)
	if err != nil {
		a.log.Warn("cannot record an audit finding", "path", path, "class", e.Class, "err", err)
		return
	}
	a.st.Submit(store.Change{Op: store.OpPutMeta, Path: []byte(metaEntry + path), Value: b}, func(err error) {
		// On the index's writer goroutine: count, log and queue only.
		if err != nil {
			a.log.Warn("cannot record an audit finding", "path", path, "class", e.Class, "err", err)
			return
		}
		a.rememberEntry(path, &e)
		if !news {
			a.log.Info("an audit finding changed", "path", path, "class", e.Class)
			return
		}
		a.mu.Lock()
		a.totals[c]++
		a.mu.Unlock()
		pr := e.problem(path)
		a.log.Warn("audit found a problem", "class", e.Class, "path", path, "recorded", pr.RecordedKey,
			"observed", pr.ObservedKey, "why", e.Why)
		a.note.send(pr)
	})
}

// classRecord gives rec, the flagged record the indexer wrote for path,
// the state of the class its finding is filed with, when it has the other
// one: a file found corrupt, then unreadable, then readable again under
// a moved ctime is hashed as untraced, and its finding says corrupt. So
// lookup says what the finding says. The change is conditional: a record
// written since is left as it is.
func (a *Auditor) classRecord(path string, rec store.Record, class string) {
	c, _ := parseClass(class)
	st := flagState[c]
	if !c.keyKept() || !rec.State.Flagged() || rec.State == st {
		return
	}
	nr := rec
	nr.State = st
	a.st.Submit(store.Change{Op: store.OpPutIf, Path: []byte(path), Record: nr, Expect: rec, Finding: class}, func(err error) {
		if err != nil && !errors.Is(err, store.ErrConflict) {
			a.log.Warn("cannot flag a record with its finding's class", "path", path, "class", class, "err", err)
		}
	})
}
