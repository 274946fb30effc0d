package query

import (
	"context"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/dirdups"
	"github.com/annexd/annexd/store"
)

// DirDups answers the duplicate folders (apiserver.DirDupFinder) from the
// index, within the roots (internal/dirdups).
type DirDups struct{ x *Index }

// NewDirDups returns the duplicate folders of x's index.
func NewDirDups(x *Index) DirDups { return DirDups{x} }

// DirDups calls fn for each report, most reclaimable bytes first, at most
// q.Limit of them, then for each folder of unknown content.
func (d DirDups) DirDups(ctx context.Context, q api.DirDupQuery, fn func(api.DirDup) error) error {
	opts := dirdups.Options{MinSize: q.MinSize, Paths: q.Paths,
		InScope: func(p []byte) bool { return !d.x.outsideRoot(p) }}
	res, err := dirdups.Find(ctx, dirSource(d), opts)
	if err != nil {
		return err
	}
	for i, r := range res.Reports {
		if q.Limit > 0 && i == q.Limit {
			break
		}
		if err := fn(dirReport(r)); err != nil {
			return err
		}
	}
	for _, u := range res.Unknown {
		if err := fn(api.DirDup{Kind: api.DirUnknown, Folders: []api.DirFolder{{Path: u.Path}}, UnknownFiles: u.Files}); err != nil {
			return err
		}
	}
	return nil
}

func dirReport(r dirdups.Report) api.DirDup {
	out := api.DirDup{Kind: api.DirIdentical, Reclaimable: r.Reclaimable, Unsurveyed: r.Unsurveyed}
	if r.Kind == dirdups.Contained {
		out.Kind = api.DirContained
	}
	for _, f := range r.Folders {
		out.Folders = append(out.Folders, api.DirFolder{Path: f.Path, Files: f.Files, Bytes: f.Bytes})
	}
	return out
}

// dirSource reads the store, and surveys a group with no survey kept as
// whereis does (whereisSurvey): dups and dups --dirs count alike.
type dirSource struct{ x *Index }

func (s dirSource) Folders(ctx context.Context, fn func(dir []byte, files []store.FolderFile) error) error {
	return s.x.cfg.Store.Folders(ctx, fn)
}

// maxDirSurveys bounds the groups one dups --dirs surveys itself; the
// daemon surveys the others while idle, and until then they count their
// size, as not surveyed.
const maxDirSurveys = 1024

// Surveys returns the surveys the store keeps, and surveys the groups of
// up to maxDirSurveys others now.
func (s dirSource) Surveys(cs []store.Content) ([]*store.Survey, error) {
	svs, err := s.x.cfg.Store.SurveysOf(cs)
	if err != nil {
		return nil, err
	}
	made := 0
	for i, c := range cs {
		if svs[i] == nil && made < maxDirSurveys {
			made++
			svs[i] = s.x.whereisSurvey(api.WhereisQuery{Backend: c.Backend, Digest: c.Digest})
		}
	}
	return svs, nil
}

func (s dirSource) Stats() (store.Stats, error) { return s.x.cfg.Store.Stats() }
