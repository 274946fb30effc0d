package query

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// Whereis lists the files with q's content in path order, marking the
// names of one inode (LinkOf) and the copies that share blocks
// (SharesWith) as far as the group's survey tells (whereisSurvey).
func (x *Index) Whereis(ctx context.Context, q api.WhereisQuery, fn func(api.Location) error) error {
	paths, err := x.cfg.Store.ByDigest(q.Backend, q.Digest)
	if err != nil {
		return err
	}
	slices.SortFunc(paths, bytes.Compare)
	var (
		firsts firstNames
		marks  *shareMarks
	)
	if len(paths) > 1 {
		if sv := x.whereisSurvey(q); sv != nil {
			marks = newShareMarks(sv)
		}
	}
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec, ok, err := x.cfg.Store.Get(p)
		if err != nil {
			return err
		}
		if !ok || !rec.HasDigest() {
			continue // changed since ByDigest read it
		}
		loc, err := x.freshLocation(p, &rec)
		if err != nil {
			return err
		}
		loc.OutsideRoots = x.outsideRoot(p)
		loc.LinkOf = firsts.linkOf(rec.Dev, rec.Ino, p)
		if loc.LinkOf == nil && marks != nil {
			loc.SharesWith = marks.sharesWith(rec.Dev, rec.Ino, p)
		}
		if err := fn(loc); err != nil {
			return err
		}
	}
	return nil
}

// maxWhereisSurvey is the most inodes whereis surveys itself: a larger
// group is marked only once a survey is kept (dups makes one).
const maxWhereisSurvey = 256

// whereisSurvey returns the survey of q's group: the one the store
// keeps, or a new one, which the store is given to keep; nil for content
// that is not a duplicate group, has no bytes, or has too many copies.
func (x *Index) whereisSurvey(q api.WhereisQuery) *store.Survey {
	g, ok, err := x.cfg.Store.DupGroup(q.Backend, q.Digest, store.DupOptions{Brief: true})
	switch {
	case err != nil || !ok || g.Size == 0:
		return nil
	case g.Survey != nil:
		return g.Survey
	case g.Inodes > maxWhereisSurvey:
		return nil
	}
	return x.surveyOf(g, true)
}

// location describes a record as the index holds it, without looking at
// the file.
func location(p []byte, rec *store.Record) (api.Location, error) {
	k, err := key.FromDigest(rec.Backend, rec.Digest, rec.Size, filepath.Base(string(p)), key.ExtRule{})
	if err != nil {
		return api.Location{}, fmt.Errorf("daemon: key of %q: %w", p, err)
	}
	return api.Location{Path: p, Key: k, Size: rec.Size, State: rec.State.String()}, nil
}

// freshLocation is location with Stale set when a fresh lstat disagrees
// with the record or the record is racily clean.
func (x *Index) freshLocation(p []byte, rec *store.Record) (api.Location, error) {
	loc, err := location(p, rec)
	if err != nil {
		return loc, err
	}
	loc.Stale = !x.cfg.Indexer.Unchanged(string(p), rec)
	return loc, nil
}
