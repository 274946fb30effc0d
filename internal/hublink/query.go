package hublink

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/hub"
	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/key"
)

var _ api.Hubber = (*Link)(nil)

// hubTimeout bounds one query to the hub.
const hubTimeout = 10 * time.Second

// client returns a client of the hub over the publisher's connection.
func (l *Link) client() (*hub.Client, error) {
	if l == nil {
		return nil, api.ErrNoHub
	}
	p := l.publisher()
	if p == nil {
		return nil, fmt.Errorf("%w: the link is not up yet", api.ErrHubUnreachable)
	}
	nc, st := p.Conn(), p.Status()
	if nc == nil || !nc.IsConnected() || st.Refused != "" {
		msg := "not connected"
		switch {
		case st.Refused != "":
			msg = st.Refused
		case st.LastError != "":
			msg = st.LastError
		}
		return nil, fmt.Errorf("%w: %s: %s", api.ErrHubUnreachable, l.where(), msg)
	}
	return hub.NewClient(nc, l.pcfg.Name), nil
}

// ask runs one query with the hub's errors mapped to the API's.
func (l *Link) ask(ctx context.Context, fn func(ctx context.Context, c *hub.Client) error) error {
	c, err := l.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, hubTimeout)
	defer cancel()
	err = fn(ctx, c)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, hub.ErrUnreachable):
		return fmt.Errorf("%w: %s: %v", api.ErrHubUnreachable, l.where(), err)
	case errors.Is(err, hub.ErrQuery):
		return fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	return err
}

// HubWhereis implements api.Hubber.
func (l *Link) HubWhereis(ctx context.Context, q api.HubWhereisQuery) (api.HubContent, error) {
	var out api.HubContent
	err := l.ask(ctx, func(ctx context.Context, c *hub.Client) error {
		hc, err := c.Whereis(ctx, q.Backend.Base().String(), hex.EncodeToString(q.Digest), q.Size)
		if err == nil {
			out, err = hubContent(hc)
		}
		return err
	})
	return out, err
}

// HubDups implements api.Hubber.
func (l *Link) HubDups(ctx context.Context, q api.HubDupsQuery) (api.HubPage, error) {
	var out api.HubPage
	err := l.ask(ctx, func(ctx context.Context, c *hub.Client) error {
		r, err := c.Dups(ctx, hubwire.DupsRequest{MinSize: q.MinSize, After: q.After, Limit: q.Limit})
		if err == nil {
			out, err = hubPage(r)
		}
		return err
	})
	return out, err
}

// HubCopies implements api.Hubber: this host's files unless q.AllHosts.
func (l *Link) HubCopies(ctx context.Context, q api.HubCopiesQuery) (api.HubPage, error) {
	var out api.HubPage
	err := l.ask(ctx, func(ctx context.Context, c *hub.Client) error {
		req := hubwire.CopiesRequest{FewerThan: q.FewerThan, Host: l.pcfg.Name, Prefix: q.Path, After: q.After, Limit: q.Limit}
		if q.AllHosts {
			req.Host, req.Prefix = "", nil
		}
		r, err := c.Copies(ctx, req)
		if err == nil {
			out, err = hubPage(r)
		}
		return err
	})
	return out, err
}

// HubHosts implements api.Hubber.
func (l *Link) HubHosts(ctx context.Context) ([]api.HubHost, error) {
	var out []api.HubHost
	err := l.ask(ctx, func(ctx context.Context, c *hub.Client) error {
		states, err := c.Hosts(ctx)
		for _, s := range states {
			out = append(out, api.HubHost{Name: s.Name, HostID: s.HostID, IndexID: s.IndexID, Seq: s.Seq, Complete: s.Complete,
				Resending: s.Resending != 0, LastSeen: s.LastSeen, Records: s.Records, Bytes: s.Bytes, Stale: s.Stale})
		}
		return err
	})
	return out, err
}

func hubPage(r hubwire.ListReply) (api.HubPage, error) {
	out := api.HubPage{Next: r.Next, Items: make([]api.HubContent, 0, len(r.Items))}
	for _, c := range r.Items {
		hc, err := hubContent(c)
		if err != nil {
			return out, err
		}
		out.Items = append(out.Items, hc)
	}
	return out, nil
}

func hubContent(c hubwire.Content) (api.HubContent, error) {
	b, err := key.ParseBackend(c.Backend)
	if err != nil {
		return api.HubContent{}, fmt.Errorf("daemon: the hub's answer: %w", err)
	}
	d, err := hex.DecodeString(c.Digest)
	if err != nil || len(d) != b.DigestLen() {
		return api.HubContent{}, fmt.Errorf("daemon: the hub's answer: digest %q", c.Digest)
	}
	out := api.HubContent{Backend: b, Digest: d, Size: c.Size, Holders: make([]api.HubHolder, 0, len(c.Holders))}
	for _, h := range c.Holders {
		out.Holders = append(out.Holders, api.HubHolder{Host: h.Host, Stale: h.Stale, LastSeen: h.LastSeen, Paths: h.Paths, Count: h.Count,
			Unconfirmed: h.Unconfirmed})
	}
	return out, nil
}
