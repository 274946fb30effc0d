package hublink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/internal/hub"
	"github.com/annexd/annexd/internal/hubcopy"
	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/internal/publish"
)

// ErrConfig: the [hub] or [publish] section cannot work.
var ErrConfig = errors.New("daemon: bad hub configuration")

// Link is the daemon's part in the hub: the hub it runs on the machine
// that is usually on, and the publisher of its own index's changes.
type Link struct {
	log  *slog.Logger
	url  string
	hub  *hub.Hub       // nil unless [hub] is enabled
	pcfg publish.Config // Run adds the host id, and on the hub the in-process options
	idf  string         // the host id's file
	dir  string         // the hub's directory, when it runs here

	rate int64 // [publish] copy_rate, bytes a second; < 0: none

	mu      sync.Mutex
	pub     *publish.Publisher // once running
	copier  *hubcopy.Copier    // once running
	problem string             // why the publisher stopped
}

// New checks the [hub] and [publish] sections and reads the
// credentials; nil when neither is on.
func New(cfg config.Config, log *slog.Logger) (*Link, error) {
	if !cfg.Linked() {
		return nil, nil
	}
	where := "defaults"
	if cfg.File != "" {
		where = cfg.File
	}
	bad := func(section string, err error) error {
		return fmt.Errorf("%w: [%s] in %s: %w", ErrConfig, section, where, err)
	}
	p := cfg.Publish
	name := p.Name
	if name == "" {
		var err error
		if name, err = publish.DefaultName(); err != nil {
			return nil, bad("publish", fmt.Errorf("%w; set name", err))
		}
	}
	if err := hubwire.CheckName(name); err != nil {
		return nil, bad("publish", err)
	}
	l := &Link{log: log.With("part", "hub"), url: p.Hub, rate: int64(p.CopyRate), idf: cfg.Index + "-host", dir: cfg.Hub.Dir, pcfg: publish.Config{
		Name: name, URL: p.Hub, Batch: p.Batch, Heartbeat: p.Heartbeat, Logger: log.With("part", "publish"),
	}}
	if cfg.Hub.Enabled {
		hc, err := hubConfig(cfg.Hub, name, l.log)
		if err == nil {
			l.hub, err = hub.New(hc)
		}
		if err != nil {
			return nil, bad("hub", err)
		}
		return l, nil
	}
	opts, err := credentials(p, name, l.log)
	if err != nil {
		return nil, bad("publish", err)
	}
	l.pcfg.Options = opts
	return l, nil
}

// Start runs the hub, when this daemon has one, and the publisher under
// g. The hub's failure ends the daemon; the publisher's is reported in
// the status and leaves the index alone.
func (l *Link) Start(ctx context.Context, g *errgroup.Group, st publish.Store) {
	if l == nil {
		return
	}
	if l.hub != nil {
		g.Go(func() error {
			if err := l.hub.Run(ctx); err != nil {
				return fmt.Errorf("daemon: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error {
		if err := l.publish(ctx, st); err != nil && ctx.Err() == nil {
			l.log.Error("publishing to the hub stopped; the index goes on without it", "err", err)
			l.mu.Lock()
			l.problem = err.Error()
			l.mu.Unlock()
		}
		return nil
	})
}

// publish sends the index's changes until ctx ends.
func (l *Link) publish(ctx context.Context, st publish.Store) error {
	id, err := publish.LoadHostID(l.idf)
	if err != nil {
		return err
	}
	cfg := l.pcfg
	cfg.HostID = id
	if cfg.Instance, err = publish.LoadInstance(l.idf + "-publisher"); err != nil {
		return err
	}
	if l.hub != nil {
		select {
		case <-l.hub.Ready():
		case <-ctx.Done():
			return nil
		}
		cfg.Options = l.hub.SelfOptions()
	}
	p, err := publish.New(st, cfg)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.pub = p
	l.mu.Unlock()
	if cs, ok := st.(hubcopy.Store); ok {
		defer l.startCopier(ctx, cfg, cs)()
	}
	l.log.Info("publishing to the hub", "name", cfg.Name, "url", l.where(), "host_id", hubwire.UUIDString(id))
	return p.Run(ctx)
}

// startCopier serves copies to other hosts, and fetches theirs, over a
// connection of its own with the publisher's credentials, until ctx is
// done; wait waits for it to end.
func (l *Link) startCopier(ctx context.Context, pc publish.Config, st hubcopy.Store) (wait func()) {
	rate := l.rate
	if rate < 0 {
		rate = -1
	}
	c, err := hubcopy.New(hubcopy.Config{Name: pc.Name, URL: pc.URL, Options: pc.Options, Index: whereis{l}, Store: st,
		Rate: rate, Logger: l.log.With("part", "copies")})
	if err != nil {
		l.log.Error("copies between hosts are off", "err", err)
		return func() {}
	}
	l.mu.Lock()
	l.copier = c
	l.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			l.log.Error("copies between hosts stopped", "err", err)
		}
	}()
	return func() { <-done }
}

// Remote fetches verified copies from other hosts (the heal's remote
// source); nil without a link, or before the link is up.
func (l *Link) Remote() *hubcopy.Copier {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.copier
}

// whereis asks the hub's view over the publisher's connection.
type whereis struct{ l *Link }

func (w whereis) Whereis(ctx context.Context, backend, digest string, size int64) (hubwire.Content, error) {
	c, err := w.l.client()
	if err != nil {
		return hubwire.Content{}, err
	}
	return c.Whereis(ctx, backend, digest, size)
}

func (l *Link) where() string {
	if l.hub != nil {
		return "in process"
	}
	return l.url
}

func (l *Link) publisher() *publish.Publisher {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pub
}

// Exclude lists the link's files, never indexed: the host id, the
// publisher's instance (and its temporary) and the hub's directory.
func (l *Link) Exclude() []string {
	if l == nil {
		return nil
	}
	x := []string{l.idf, l.idf + "-publisher", l.idf + "-publisher.new"}
	if l.hub != nil {
		x = append(x, l.dir)
	}
	return x
}

// Status is the link for api.Status; nil without one.
func (l *Link) Status() *api.HubStatus {
	if l == nil {
		return nil
	}
	out := &api.HubStatus{Name: l.pcfg.Name, URL: l.url, Serving: l.hub != nil}
	if l.hub != nil {
		out.Listen = l.hub.ClientURL()
		for _, h := range l.hub.Hosts() {
			out.Hosts++
			if h.Stale {
				out.Stale++
			}
		}
	}
	l.mu.Lock()
	p, problem := l.pub, l.problem
	l.mu.Unlock()
	out.Problem = problem
	if p == nil {
		return out
	}
	s := p.Status()
	out.Connected, out.IndexID, out.Seq, out.Published, out.Acked, out.Lag = s.Connected, s.IndexID, s.Seq, s.Published, s.Acked, s.Lag
	out.Resending, out.Resends, out.LastAck, out.LastError = s.Resending, s.Resends, s.LastAck, s.LastError
	out.Rival = s.Rival
	// Connected and refused all it sends, or waiting for another machine
	// to give this host's name up, is no link.
	out.Connected = out.Connected && s.Refused == "" && !s.RivalHolds
	return out
}
