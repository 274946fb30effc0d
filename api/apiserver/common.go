package apiserver

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/roots"
)

// common is what every part's handlers share with the server: the parts
// (nil until Ready), the root aliases, the log, the request metrics and
// the shutdown signal. The server routes; the handlers of each part hang
// off a small type that holds a common.
type common struct {
	parts   *atomic.Pointer[Parts]
	aliases map[string]string
	log     *slog.Logger
	metrics *metrics
	closing <-chan struct{}
}

// part returns the parts served; nil before Ready.
func (c *common) part() *Parts { return c.parts.Load() }

// index is the Index served; only requests that passed serving ask.
func (c *common) index() api.Index { return c.part().Index }

// roots returns the Index's roots with their aliases.
func (c *common) roots() roots.Set { return roots.Of(c.index().Roots(), c.aliases) }

// indexError reports a failure of the Index before a stream started.
func (c *common) indexError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client is gone; nobody reads the answer
	}
	c.log.Error("api index failed", "path", r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
}

// cancelOnClose calls cancel when the server shuts down before ctx ends.
func (c *common) cancelOnClose(ctx context.Context, cancel context.CancelFunc) {
	go func() {
		select {
		case <-c.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
}
