package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/internal/hub"
	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/internal/publish"
	"github.com/annexd/annexd/store"
)

// ErrHubConfig: the [hub] or [publish] section cannot work.
var ErrHubConfig = errors.New("daemon: bad hub configuration")

// link is the daemon's part in the hub: the hub it runs on the machine
// that is usually on, and the publisher of its own index's changes.
type link struct {
	log  *slog.Logger
	url  string
	hub  *hub.Hub       // nil unless [hub] is enabled
	pcfg publish.Config // Run adds the host id, and on the hub the in-process options
	idf  string         // the host id's file
	dir  string         // the hub's directory, when it runs here

	mu      sync.Mutex
	pub     *publish.Publisher // once running
	problem string             // why the publisher stopped
}

// newLink checks the [hub] and [publish] sections and reads the
// credentials; nil when neither is on.
func newLink(cfg config.Config, log *slog.Logger) (*link, error) {
	if !cfg.Linked() {
		return nil, nil
	}
	where := "defaults"
	if cfg.File != "" {
		where = cfg.File
	}
	bad := func(section string, err error) error {
		return fmt.Errorf("%w: [%s] in %s: %w", ErrHubConfig, section, where, err)
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
	l := &link{log: log.With("part", "hub"), url: p.Hub, idf: cfg.Index + "-host", dir: cfg.Hub.Dir, pcfg: publish.Config{
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

// hubConfig turns [hub] into the hub's configuration; self is the name
// this machine's own annexd publishes under.
func hubConfig(h config.Hub, self string, log *slog.Logger) (hub.Config, error) {
	hc := hub.Config{Listen: h.Listen, Dir: h.Dir, Plaintext: h.Plaintext, Self: self, StaleAfter: h.StaleAfter,
		MaxStreamBytes: int64(h.MaxStreamBytes), Logger: log}
	for _, host := range h.Hosts {
		hc.Hosts = append(hc.Hosts, hub.Host{Name: host.Name, Password: host.PasswordHash, Nkey: host.Nkey})
	}
	if h.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(h.TLSCert, h.TLSKey)
		if err != nil {
			return hc, fmt.Errorf("tls_cert, tls_key: %w", err)
		}
		hc.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if h.Cluster.On() {
		cl, err := clusterConfig(h.Cluster, hc.TLS, log)
		if err != nil {
			return hc, err
		}
		hc.Cluster = cl
	}
	return hc, nil
}

// clusterConfig turns [hub.cluster] into the hub's: the routes' secret,
// and the hub's certificate with the roots that sign the other nodes'.
func clusterConfig(c config.HubCluster, hubTLS *tls.Config, log *slog.Logger) (*hub.Cluster, error) {
	secret, err := readSecret(c.PasswordFile, log)
	if err != nil {
		return nil, fmt.Errorf("cluster.password_file: %w", err)
	}
	cl := &hub.Cluster{Name: c.Name, Listen: c.Listen, Routes: c.Routes, Nodes: c.Nodes, Secret: secret}
	if hubTLS != nil {
		cl.TLS = hubTLS.Clone()
		if c.CAFile != "" {
			if cl.TLS.RootCAs, err = readCA(c.CAFile); err != nil {
				return nil, fmt.Errorf("cluster.ca_file: %w", err)
			}
		}
	}
	return cl, nil
}

// readSecret reads a one-line secret, and warns when others may read it.
func readSecret(path string, log *slog.Logger) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	warnReadable(path, log)
	return s, nil
}

func warnReadable(path string, log *slog.Logger) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the hub credentials can be read by other users; run chmod 600", "path", path, "mode", fi.Mode().Perm().String())
	}
}

func readCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// credentials reads this host's secret and the hub's CA.
func credentials(p config.Publish, name string, log *slog.Logger) ([]nats.Option, error) {
	var opts []nats.Option
	secret := p.NkeySeedFile
	if secret != "" {
		o, err := nats.NkeyOptionFromSeed(secret)
		if err != nil {
			return nil, fmt.Errorf("nkey_seed_file: %w", err)
		}
		opts = append(opts, o)
		warnReadable(secret, log)
	} else {
		pw, err := readSecret(p.PasswordFile, log)
		if err != nil {
			return nil, fmt.Errorf("password_file: %w", err)
		}
		opts = append(opts, nats.UserInfo(name, pw))
	}
	if p.CAFile != "" {
		pool, err := readCA(p.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		opts = append(opts, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	return opts, nil
}

// start runs the hub, when this daemon has one, and the publisher under
// g. The hub's failure ends the daemon; the publisher's is reported in
// the status and leaves the index alone.
func (l *link) start(ctx context.Context, g *errgroup.Group, st *store.Store) {
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
func (l *link) publish(ctx context.Context, st *store.Store) error {
	id, err := publish.LoadHostID(l.idf)
	if err != nil {
		return err
	}
	cfg := l.pcfg
	cfg.HostID = id
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
	l.log.Info("publishing to the hub", "name", cfg.Name, "url", l.where(), "host_id", hubwire.UUIDString(id))
	return p.Run(ctx)
}

func (l *link) where() string {
	if l.hub != nil {
		return "in process"
	}
	return l.url
}

func (l *link) publisher() *publish.Publisher {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pub
}

// exclude lists the link's files, never indexed: the host id and the
// hub's directory.
func (l *link) exclude() []string {
	if l == nil {
		return nil
	}
	x := []string{l.idf}
	if l.hub != nil {
		x = append(x, l.dir)
	}
	return x
}

// status is the link for api.Status; nil without one.
func (l *link) status() *api.HubStatus {
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
	return out
}

// dropChanges removes a change log left from a run with a hub: nothing
// follows it now, and a later link resends the index whole anyway.
func (a *App) dropChanges() {
	if a.cfg.Linked() {
		return
	}
	if err := a.st.DropChanges(); err != nil {
		a.log.Warn("cannot drop the change log of an earlier hub link", "err", err)
	}
}
