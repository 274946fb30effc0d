package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
)

// Problems calls fn for every finding that stands (a file found corrupt,
// unreadable, changed without a trace, or with a lost write), under the
// path of its file now, in path order (by bytes). A finding no record
// holds any more (the file changed, or was healed) is not listed.
func (a *Auditor) Problems(ctx context.Context, fn func(Problem) error) error {
	if err := a.ready(ctx); err != nil {
		return err
	}
	ls, err := a.resolveAll(ctx)
	if err != nil {
		return err
	}
	for _, l := range ls {
		p := l.e.problem(l.path)
		p.filed = l.at
		if err := fn(p); err != nil {
			return err
		}
	}
	return nil
}

// AcceptResult says what Accept did.
type AcceptResult struct {
	// Accepted are the paths whose content now is their record's.
	Accepted [][]byte
	// Failed are the paths that could not be read; Errs says why.
	Failed [][]byte
	Errs   []error
	// Released are the healed paths whose rotten bytes, kept aside by
	// the heal, were removed.
	Released [][]byte
}

// Accept takes the content that the files flagged at or below path have
// now, once the user has dealt with them: a corrupt, untraced or
// unreadable file is read again and its record takes the digest read; a
// lost write is acknowledged. The rotten bytes that heals of files there
// kept aside are removed. ErrNotFlagged when nothing there is flagged or
// kept aside.
func (a *Auditor) Accept(ctx context.Context, path []byte) (AcceptResult, error) {
	var res AcceptResult
	if len(path) == 0 || path[0] != '/' {
		return res, fmt.Errorf("%w: %q is not absolute", ErrPath, path)
	}
	released, err := a.ReleaseHeals(ctx, path, 0)
	res.Released = released
	if err != nil {
		return res, err
	}
	var todo []Problem
	err = a.Problems(ctx, func(p Problem) error {
		if bytes.Equal(p.Path, path) || bytes.HasPrefix(p.Path, append(bytes.TrimSuffix(path, []byte("/")), '/')) {
			todo = append(todo, p)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if len(todo) == 0 && len(released) == 0 {
		return res, fmt.Errorf("%w: %s", ErrNotFlagged, path)
	}
	rd := newReader(nil, readSize)
	for _, p := range todo {
		if err := a.acceptOne(ctx, rd, &p); err != nil {
			res.Failed = append(res.Failed, p.Path)
			res.Errs = append(res.Errs, err)
			continue
		}
		res.Accepted = append(res.Accepted, p.Path)
	}
	return res, nil
}

// acceptOne accepts one problem.
func (a *Auditor) acceptOne(ctx context.Context, rd *reader, p *Problem) error {
	path := string(p.Path)
	if p.Class == LostWrite {
		return a.deleteEntry(ctx, p.filed)
	}
	rec, ok, err := a.st.Get(p.Path)
	if err != nil {
		return err
	}
	if !ok {
		return a.deleteEntry(ctx, p.filed)
	}
	fi, err := fsstat.Lstat(path)
	if err != nil {
		return err
	}
	h, err := a.dg.NewHash(rec.Backend)
	if err != nil {
		return err
	}
	start := time.Now().UnixNano()
	got := rd.read(ctx, path, fi, h, false)
	if got.Err == nil && !got.After.Same(fi) {
		got.Err = fmt.Errorf("audit: %s changed while read", path)
	}
	if got.Err != nil {
		return got.Err
	}
	nr := rec
	nr.Digest, nr.State = got.Digest, store.StateOK
	nr.Size, nr.MtimeNs, nr.CtimeNs, nr.Dev, nr.Ino = fi.Size, fi.MtimeNs, fi.CtimeNs, fi.Dev, fi.Ino
	nr.HashedAt, nr.VerifiedAt = start, start
	err = commit(a.st, store.Change{Op: store.OpPutIf, Path: p.Path, Record: nr, Expect: rec})
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("audit: %s changed meanwhile; the indexer records it", path)
	}
	if err != nil {
		return err
	}
	a.log.Info("audit finding accepted", "path", path, "class", p.Class.String())
	return a.deleteEntry(ctx, p.filed)
}
