package audit

import (
	"bytes"
	"context"
	"slices"
	"strings"

	"github.com/annexd/annexd/store"
)

// A finding is an entry of a problem class, kept in the index's meta under
// the path it was filed at, with the inode of its file. It stands while a
// record holds it (holds): the flagged record with the recorded digest, or
// for a lost write the record of the bytes on disk. So only an edit (a new
// digest), an accept (the entry goes) or a heal (the recorded digest read
// again) clears it; hashing the same bytes again, a restart or a rename
// does not. A file renamed, or moved with its folder, takes its record
// along: the finding is then found under the inode's path now (resolve)
// and listed there, and the entry moves to that path when the audit next
// prunes its entries. The audit keeps the findings in memory too, so that
// status counts exactly what Problems lists without reading every entry.

// holds reports whether r is the record the finding e stands for.
func holds(r *store.Record, e *entry) bool {
	c, _ := parseClass(e.Class)
	switch c {
	case LostWrite:
		return r.State == store.StateOK && bytes.Equal(r.Digest, e.Observed)
	case Corrupt, Untraced, Unreadable:
		flagged := r.State == store.StateCorrupt || r.State == store.StateUnreadable
		return flagged && (len(e.Recorded) == 0 || bytes.Equal(r.Digest, e.Recorded))
	}
	return false
}

// standsFor is the class the finding e stands for: its own, or for an
// unreadable file the class it replaced.
func (e *entry) standsFor() Class {
	c, _ := parseClass(e.Class)
	if p, ok := parseClass(e.Prior); ok && c == Unreadable && p.keyKept() {
		return p
	}
	return c
}

// listed is a finding and where its file is now.
type listed struct {
	at   string // the path its entry is filed at
	path string // the path of its file now
	e    entry
}

// snapshot returns the findings kept in memory.
func (a *Auditor) snapshot() map[string]entry {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]entry, len(a.findings))
	for p, e := range a.findings {
		out[p] = e
	}
	return out
}

// remember keeps the entry of path in memory when it is a finding, and
// forgets it otherwise. Called once the entry is committed.
func (a *Auditor) rememberEntry(path string, e *entry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, _ := parseClass(e.Class); c.Problem() {
		a.findings[path] = *e
		return
	}
	delete(a.findings, path)
}

func (a *Auditor) forgetEntry(path string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.findings, path)
}

// resolveAll returns the findings that stand, each under the path of its
// file now, in path order (by bytes).
func (a *Auditor) resolveAll(ctx context.Context) ([]listed, error) {
	all := a.snapshot()
	out := make([]listed, 0, len(all))
	for at, e := range all {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		path, ok, err := a.resolve(at, &e, all)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, listed{at: at, path: path, e: e})
		}
	}
	slices.SortFunc(out, func(x, y listed) int { return strings.Compare(x.path, y.path) })
	return out, nil
}

// resolve finds the file the finding e, filed at path, stands for now: at
// path, or under another name of its inode that has no finding of its own
// (in all). ok is false when none holds it.
func (a *Auditor) resolve(path string, e *entry, all map[string]entry) (string, bool, error) {
	r, ok, err := a.st.Get([]byte(path))
	if err != nil {
		return "", false, err
	}
	if ok && holds(&r, e) {
		return path, true, nil
	}
	if e.Ino == 0 {
		return "", false, nil
	}
	names, err := a.st.ByInodeAll(e.Dev, e.Ino)
	if err != nil {
		return "", false, err
	}
	for _, n := range names {
		q := string(n)
		if _, own := all[q]; own || q == path {
			continue
		}
		r, ok, err := a.st.Get(n)
		if err != nil {
			return "", false, err
		}
		if ok && holds(&r, e) {
			return q, true, nil
		}
	}
	return "", false, nil
}

// standing returns the class of the finding that stands for rec, the
// flagged record of path, or 0.
func (a *Auditor) standing(ctx context.Context, path string, rec *store.Record) Class {
	if e, ok := a.findingOf(path, rec); ok {
		return e.standsFor()
	}
	all := a.snapshot() // filed under another path: the file was renamed
	for at, e := range all {
		if e.Ino != rec.Ino || e.Dev != rec.Dev || ctx.Err() != nil {
			continue
		}
		if p, ok, err := a.resolve(at, &e, all); err == nil && ok && p == path {
			return e.standsFor()
		}
	}
	return 0
}

// problemCount counts the findings that stand: what Problems lists.
func (a *Auditor) problemCount(ctx context.Context) (int64, error) {
	ls, err := a.resolveAll(ctx)
	return int64(len(ls)), err
}
