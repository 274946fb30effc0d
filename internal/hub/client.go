package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/annexd/annexd/internal/hubwire"
)

// ErrUnreachable: the hub did not answer.
var ErrUnreachable = errors.New("hub: not reachable")

// Client asks the hub's queries over a host's NATS connection.
type Client struct {
	nc *nats.Conn
}

// NewClient returns a client using nc, which a host's publisher may share.
func NewClient(nc *nats.Conn) *Client { return &Client{nc: nc} }

func (c *Client) ask(ctx context.Context, query string, req, rep any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	m, err := c.nc.RequestWithContext(ctx, hubwire.QueryPrefix+query, data)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, query, err)
	}
	if err := json.Unmarshal(m.Data, rep); err != nil {
		return fmt.Errorf("hub: %s reply: %w", query, err)
	}
	return nil
}

func replyErr(msg string) error {
	if msg == "" {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrQuery, msg)
}

// Whereis asks which hosts hold a digest (base backend name, hex digest).
func (c *Client) Whereis(ctx context.Context, backend, digest string) (hubwire.Content, error) {
	var r hubwire.WhereisReply
	if err := c.ask(ctx, hubwire.QueryWhereis, hubwire.WhereisRequest{Backend: backend, Digest: digest}, &r); err != nil {
		return r.Content, err
	}
	return r.Content, replyErr(r.Error)
}

// Dups asks for one page of content held by two hosts or more.
func (c *Client) Dups(ctx context.Context, req hubwire.DupsRequest) (hubwire.ListReply, error) {
	var r hubwire.ListReply
	if err := c.ask(ctx, hubwire.QueryDups, req, &r); err != nil {
		return r, err
	}
	return r, replyErr(r.Error)
}

// Copies asks for one page of content held by fewer than req.FewerThan
// fresh hosts.
func (c *Client) Copies(ctx context.Context, req hubwire.CopiesRequest) (hubwire.ListReply, error) {
	var r hubwire.ListReply
	if err := c.ask(ctx, hubwire.QueryCopies, req, &r); err != nil {
		return r, err
	}
	return r, replyErr(r.Error)
}

// Hosts lists every host the hub knows, with its state.
func (c *Client) Hosts(ctx context.Context) ([]hubwire.State, error) {
	var r hubwire.HostsReply
	if err := c.ask(ctx, hubwire.QueryHosts, struct{}{}, &r); err != nil {
		return nil, err
	}
	return r.Hosts, replyErr(r.Error)
}
