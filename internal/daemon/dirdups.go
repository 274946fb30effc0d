package daemon

import (
	"context"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/dirdups"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// dirDups answers the API's duplicate folders from the index
// (internal/dirdups), within the roots.
type dirDups struct{ x *adapter }

// DirDups implements apiserver.DirDupFinder.
func (d dirDups) DirDups(ctx context.Context, q api.DirDupQuery, fn func(api.DirDup) error) error {
	opts := dirdups.Options{MinSize: q.MinSize, Paths: q.Paths,
		InScope: func(p []byte) bool { return !d.x.a.outsideRoot(p) }}
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
type dirSource struct{ x *adapter }

func (s dirSource) Folders(ctx context.Context, fn func(dir []byte, files []store.FolderFile) error) error {
	return s.x.a.st.Folders(ctx, fn)
}

func (s dirSource) Survey(b key.Backend, d []byte) (*store.Survey, error) {
	return s.x.whereisSurvey(api.WhereisQuery{Backend: b, Digest: d}), nil
}

func (s dirSource) Stats() (store.Stats, error) { return s.x.a.st.Stats() }
