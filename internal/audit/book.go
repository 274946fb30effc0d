package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"log/slog"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// book keeps the audit's entries (metaEntry + path) in the index's meta,
// and the findings among them in memory too, so that status counts
// exactly what Problems lists without reading every entry. It has a lock
// of its own, held only while the map is read or changed.
type book struct {
	st  Store
	log *slog.Logger
	// moved is called when a finding's entry moves to its file's path now
	// (rehome), so that its pass counts it there; nil: nothing to tell.
	moved func(from, to string)

	mu       sync.Mutex
	findings map[string]entry // the problem entries, by the path they are filed at
	// changes counts the changes to findings, so that a status asked
	// right after a finding counts it (coverage.countedAt).
	changes atomic.Uint64
}

func newBook(st Store, log *slog.Logger, moved func(from, to string)) book {
	return book{st: st, log: log, moved: moved, findings: map[string]entry{}}
}

// commit submits c to st and waits for it, also while the caller's ctx
// ends: a finding or a checkpoint is either written or its write fails.
func commit(st Store, c store.Change) error {
	ch := make(chan error, 1)
	st.Submit(c, func(err error) { ch <- err })
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
func (b *book) putEntry(ctx context.Context, path []byte, e entry) error {
	v, err := json.Marshal(&e)
	if err != nil {
		return err
	}
	if err := commit(b.st, store.Change{Op: store.OpPutMeta, Path: []byte(metaEntry + string(path)), Value: v}); err != nil {
		return err
	}
	b.rememberEntry(string(path), &e)
	return nil
}

func (b *book) deleteEntry(ctx context.Context, path string) error {
	if err := commit(b.st, store.Change{Op: store.OpDeleteMeta, Path: []byte(metaEntry + path)}); err != nil {
		return err
	}
	b.forgetEntry(path)
	return nil
}

// getEntry reads the entry of path.
func (b *book) getEntry(path string) (entry, bool) {
	v, ok, err := b.st.GetMeta(metaEntry + path)
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
func (b *book) pruneEntries(ctx context.Context) error {
	var drop []string
	err := b.st.MetaPrefix(ctx, metaEntry, func(name string, v []byte) error {
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
		if err := b.deleteEntry(ctx, p); err != nil {
			return err
		}
	}
	all := b.snapshot()
	stand, err := b.resolveAll(ctx)
	if err != nil {
		return err
	}
	for _, l := range stand {
		delete(all, l.at)
		if l.path != l.at || l.e.Ino == 0 {
			if err := b.rehome(ctx, l); err != nil {
				return err
			}
		}
		if err := b.untrace(l); err != nil {
			return err
		}
	}
	for p := range all { // no record holds them
		if err := b.deleteEntry(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// rehome moves the finding l to the path of its file now, with its
// file's inode (an entry filed before inodes were kept gets it here).
func (b *book) rehome(ctx context.Context, l listed) error {
	e := l.e
	if r, ok, err := b.st.Get([]byte(l.path)); err != nil {
		return err
	} else if ok {
		e.Dev, e.Ino = r.Dev, r.Ino
	}
	if err := b.putEntry(ctx, []byte(l.path), e); err != nil {
		return err
	}
	if l.path == l.at {
		return nil
	}
	if b.moved != nil {
		b.moved(l.at, l.path)
	}
	b.log.Info("an audit finding follows its file", "from", l.at, "path", l.path, "class", e.Class)
	return b.deleteEntry(ctx, l.at)
}

// untrace gives the record of the untraced finding l the state untraced
// when it is flagged corrupt: an index of schema 7 had one flagged state
// for both, and only the finding said which it was.
func (b *book) untrace(l listed) error {
	if c, _ := parseClass(l.e.Class); c != Untraced {
		return nil
	}
	r, ok, err := b.st.Get([]byte(l.path))
	if err != nil || !ok || r.State != store.StateCorrupt {
		return err
	}
	nr := r
	nr.State = store.StateUntraced
	err = commit(b.st, store.Change{Op: store.OpPutIf, Path: []byte(l.path), Record: nr, Expect: r, Finding: Untraced.String()})
	if errors.Is(err, store.ErrConflict) {
		return nil // the indexer wrote it meanwhile
	}
	if err == nil {
		b.log.Info("a record flagged corrupt takes the class of its finding", "path", l.path, "state", nr.State.String())
	}
	return err
}

// snapshot returns the findings kept in memory.
func (b *book) snapshot() map[string]entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]entry, len(b.findings))
	for p, e := range b.findings {
		out[p] = e
	}
	return out
}

// remember keeps the entry of path in memory when it is a finding, and
// forgets it otherwise. Called once the entry is committed.
func (b *book) rememberEntry(path string, e *entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.changes.Add(1)
	if c, _ := parseClass(e.Class); c.Problem() {
		b.findings[path] = *e
		return
	}
	delete(b.findings, path)
}

// fileLoaded keeps the finding e read from the index at path, unless one
// was filed there since the start (LostWrite, Found, which work before Run).
func (b *book) fileLoaded(path string, e entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, filed := b.findings[path]; !filed {
		b.findings[path] = e
		b.changes.Add(1)
	}
}

func (b *book) forgetEntry(path string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.changes.Add(1)
	delete(b.findings, path)
}

// resolveAll returns the findings that stand, each under the path of its
// file now, in path order (by bytes), one a path. A file renamed again and
// again faster than the indexer applies the moves can leave findings
// filed at several of its old names, each resolving to its name now: the
// one filed there stands, else the one seen last.
func (b *book) resolveAll(ctx context.Context) ([]listed, error) {
	all := b.snapshot()
	byPath := make(map[string]listed, len(all))
	for at, e := range all {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		path, ok, err := b.resolve(at, &e, all)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if had, dup := byPath[path]; dup && (had.at == path || (at != path && had.e.Seen >= e.Seen)) {
			continue
		}
		byPath[path] = listed{at: at, path: path, e: e}
	}
	out := slices.Collect(maps.Values(byPath))
	slices.SortFunc(out, func(x, y listed) int { return strings.Compare(x.path, y.path) })
	return out, nil
}

// resolve finds the file the finding e, filed at path, stands for now: at
// path, or under another name of its inode that has no finding of its own
// (in all). ok is false when none holds it.
func (b *book) resolve(path string, e *entry, all map[string]entry) (string, bool, error) {
	r, ok, err := b.st.Get([]byte(path))
	if err != nil {
		return "", false, err
	}
	if ok && holds(&r, e) {
		return path, true, nil
	}
	if e.Ino == 0 {
		return "", false, nil
	}
	names, err := b.st.ByInodeAll(e.Dev, e.Ino)
	if err != nil {
		return "", false, err
	}
	for _, n := range names {
		q := string(n)
		if _, own := all[q]; own || q == path {
			continue
		}
		r, ok, err := b.st.Get(n)
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
// flagged record of path: its entry's, else the one rec's state says (an
// entry not filed: no audit heard the indexer's finding, or a crash came
// first), or 0.
func (b *book) standing(ctx context.Context, path string, rec *store.Record) Class {
	if e, ok := b.findingOf(path, rec); ok {
		return e.standsFor()
	}
	all := b.snapshot() // filed under another path: the file was renamed
	for at, e := range all {
		if e.Ino != rec.Ino || e.Dev != rec.Dev || ctx.Err() != nil {
			continue
		}
		if p, ok, err := b.resolve(at, &e, all); err == nil && ok && p == path {
			return e.standsFor()
		}
	}
	return flaggedClass(rec.State)
}

// problemCount counts the findings that stand: what Problems lists.
func (b *book) problemCount(ctx context.Context) (int64, error) {
	ls, err := b.resolveAll(ctx)
	return int64(len(ls)), err
}

// findingOf returns the finding filed at path, when rec holds it.
func (b *book) findingOf(path string, rec *store.Record) (entry, bool) {
	b.mu.Lock()
	e, ok := b.findings[path]
	b.mu.Unlock()
	return e, ok && holds(rec, &e)
}

// problem turns the entry e, of path, into a Problem.
func (e *entry) problem(path string) Problem {
	c, _ := parseClass(e.Class)
	p := Problem{Path: []byte(path), Class: c, Recorded: e.Recorded, Observed: e.Observed, Size: e.Size,
		Seen: time.Unix(0, e.Seen), Pass: e.Pass, Why: e.Why}
	if b, err := key.ParseBackend(e.Backend); err == nil {
		name := filepath.Base(path)
		if k, err := key.FromDigest(b, e.Recorded, e.Size, name, key.ExtRule{}); err == nil {
			p.RecordedKey = k.String()
		}
		if len(e.Observed) > 0 {
			if k, err := key.FromDigest(b, e.Observed, e.Size, name, key.ExtRule{}); err == nil {
				p.ObservedKey = k.String()
			}
		}
	}
	return p
}
