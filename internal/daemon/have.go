package daemon

import (
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/have"
	"github.com/annexd/annexd/store"
)

// haveFiles gives internal/have the indexer's view of files. The server
// is built before the indexer, and serves have only once it is ready.
type haveFiles struct{ a *App }

func (h haveFiles) Unchanged(path string, rec *store.Record) bool { return h.a.ix.Unchanged(path, rec) }

func (h haveFiles) Outside(path []byte) bool { return !h.a.roots.Contains(string(path)) }

func (h haveFiles) Absent(path string, dev uint64) (api.RememberedFS, bool) {
	fs, away := h.a.ix.Absent(path, dev)
	if !away {
		return api.RememberedFS{}, false
	}
	out := api.RememberedFS{Key: fs.Key, Type: fs.Type, Source: fs.Source, Point: fs.Point}
	if fs.LastSeen > 0 {
		out.LastSeen = time.Unix(0, fs.LastSeen)
	}
	return out, true
}

// haver answers /v1/have.
func (a *App) haver() *have.Finder { return have.New(a.backend, a.st, haveFiles{a}) }
