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
	nc   *nats.Conn
	name string
}

// NewClient returns a client using nc, which a host's publisher may share.
// Name is the host's name at the hub, the user nc's credentials name: the
// hub answers a host's queries only on that host's own subjects.
func NewClient(nc *nats.Conn, name string) *Client { return &Client{nc: nc, name: name} }

func (c *Client) ask(ctx context.Context, query string, req, rep any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	m, err := c.nc.RequestWithContext(ctx, hubwire.QuerySubject(c.name, query), data)
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

// Whereis asks which hosts hold a content: a base backend name, a hex
// digest and a size. A size < 0 leaves it to the hub: the size this host
// holds, else the one most hosts hold.
func (c *Client) Whereis(ctx context.Context, backend, digest string, size int64) (hubwire.Content, error) {
	req := hubwire.WhereisRequest{Backend: backend, Digest: digest}
	if size >= 0 {
		req.Size = &size
	}
	var r hubwire.WhereisReply
	if err := c.ask(ctx, hubwire.QueryWhereis, req, &r); err != nil {
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
