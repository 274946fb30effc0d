package hubcopy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// DefaultRate is the pace of a transfer when Config.Rate is 0: 20 MiB
// a second, below what a home network and a disk share with other work.
const DefaultRate = 20 << 20

// Errors of a fetch.
var (
	// ErrNoCopy: no other host holds a verified copy of the key.
	ErrNoCopy = errors.New("hubcopy: no verified copy")
	// ErrDigest: the copy received does not match its key; nothing of
	// it may be used.
	ErrDigest = errors.New("hubcopy: the copy failed its digest check")
	// ErrLink: the link to the hub is not up.
	ErrLink = errors.New("hubcopy: not connected to the hub")
	// ErrUnanswered comes with ErrNoCopy when a holder could not be asked
	// (offline, busy, no answer in time): a copy may still be there, so
	// the fetch is worth trying again later.
	ErrUnanswered = errors.New("a holder did not answer")
)

// Index is what a fetch needs of the hub's view: who holds a content
// (hub.Client has it).
type Index interface {
	Whereis(ctx context.Context, backend, digest string, size int64) (hubwire.Content, error)
}

// Store is what a holder needs of its own index.
type Store interface {
	ByDigest(b key.Backend, digest []byte) ([][]byte, error)
	Get(path []byte) (store.Record, bool, error)
}

// Config configures a Copier. Name, URL (or an in-process option), Index
// and Store are required.
type Config struct {
	// Name is this host's name at the hub: its credentials' user.
	Name string
	// URL and Options reach the hub as the publisher does (package
	// publish); the copier keeps a connection of its own.
	URL     string
	Options []nats.Option
	Index   Index
	Store   Store
	// Rate paces each transfer, in bytes a second. 0: DefaultRate; < 0:
	// no pace.
	Rate int64
	// Answer bounds the wait for a holder's answer, beyond the time its
	// reads take at Rate. Default 1 min.
	Answer time.Duration
	// Stall is how long a read of an object may make no progress before
	// Fetch gets the object again. Default 30 s.
	Stall time.Duration
	// Logger receives the copier's problems. Default: discard.
	Logger *slog.Logger
}

func (c *Config) fill() error {
	if err := hubwire.CheckName(c.Name); err != nil {
		return err
	}
	if c.Index == nil || c.Store == nil {
		return errors.New("hubcopy: no index or store")
	}
	switch {
	case c.Rate == 0:
		c.Rate = DefaultRate
	case c.Rate < 0:
		c.Rate = 0
	}
	if c.Answer <= 0 {
		c.Answer = time.Minute
	}
	if c.Stall <= 0 {
		c.Stall = defaultStall
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Stats counts what a copier did since start.
type Stats struct {
	Served   int64 // copies put for other hosts
	Refused  int64 // requests answered with no verified copy
	Fetched  int64 // copies fetched and verified
	Rejected int64 // copies fetched that failed a digest check
	Resumed  int64 // reads of an object started again after a broken link
	Ignored  int64 // messages on copy subjects that no host sent
}

// defaultStall is Config.Stall's default.
const defaultStall = 30 * time.Second

// queueLen is how many requests a holder keeps waiting.
const queueLen = 4

// Copier serves copies to other hosts and fetches copies from them.
type Copier struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	nc      *nats.Conn
	waiting map[string]chan hubwire.CopyAnswer
	queue   chan request

	served, refused, fetched, rejected, resumed, ignored atomic.Int64
}

// request is a holder's pending request.
type request struct {
	asker string
	req   hubwire.CopyRequest
}

// New returns a copier; Run connects it.
func New(cfg Config) (*Copier, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Copier{cfg: cfg, log: cfg.Logger, waiting: map[string]chan hubwire.CopyAnswer{}, queue: make(chan request, queueLen)}, nil
}

// Stats returns the counts so far.
func (c *Copier) Stats() Stats {
	return Stats{Served: c.served.Load(), Refused: c.refused.Load(), Fetched: c.fetched.Load(), Rejected: c.rejected.Load(),
		Resumed: c.resumed.Load(), Ignored: c.ignored.Load()}
}

// Run connects to the hub and serves other hosts' requests until ctx is
// done.
func (c *Copier) Run(ctx context.Context) error {
	opts := append([]nats.Option{
		nats.Name("annexd copies " + c.cfg.Name), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(100 * time.Millisecond), nats.IgnoreAuthErrorAbort(),
		nats.CustomInboxPrefix(hubwire.InboxPrefix + c.cfg.Name),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.log.Debug("hubcopy: hub connection", "err", err)
		}),
	}, c.cfg.Options...)
	nc, err := nats.Connect(c.cfg.URL, opts...)
	if err != nil {
		return fmt.Errorf("hubcopy: connect to %s: %w", c.cfg.URL, err)
	}
	defer nc.Close()
	asks, err := nc.Subscribe(hubwire.CopyAskPrefix+"*."+c.cfg.Name, c.asked)
	if err != nil {
		return fmt.Errorf("hubcopy: subscribe: %w", err)
	}
	defer asks.Unsubscribe()
	answers, err := nc.Subscribe(hubwire.CopySentPrefix+"*."+c.cfg.Name, c.answered)
	if err != nil {
		return fmt.Errorf("hubcopy: subscribe: %w", err)
	}
	defer answers.Unsubscribe()
	c.mu.Lock()
	c.nc = nc
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.nc = nil
		c.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case r := <-c.queue:
			ans := c.serve(ctx, nc, r)
			c.answer(nc, r.asker, ans)
		}
	}
}

// conn returns the connection while it is up.
func (c *Copier) conn() (*nats.Conn, error) {
	c.mu.Lock()
	nc := c.nc
	c.mu.Unlock()
	if nc == nil || !nc.IsConnected() {
		return nil, ErrLink
	}
	return nc, nil
}

// asked queues a holder's request, or answers busy.
func (c *Copier) asked(m *nats.Msg) {
	asker, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, hubwire.CopyAskPrefix), ".")
	var req hubwire.CopyRequest
	if err := hubwire.DecodeCopy(m, &req); err != nil || asker == c.cfg.Name {
		c.ignored.Add(1)
		c.log.Debug("hubcopy: request ignored", "subject", m.Subject, "err", err)
		return
	}
	select {
	case c.queue <- request{asker: asker, req: req}:
	default:
		c.mu.Lock()
		nc := c.nc
		c.mu.Unlock()
		if nc != nil {
			c.answer(nc, asker, hubwire.CopyAnswer{ID: req.ID, Key: req.Key, Status: hubwire.CopyBusy})
		}
	}
}

func (c *Copier) answer(nc *nats.Conn, asker string, ans hubwire.CopyAnswer) {
	data, err := jsonMarshal(ans)
	if err == nil {
		err = nc.Publish(hubwire.CopySentSubject(c.cfg.Name, asker), data)
	}
	if err != nil {
		c.log.Warn("hubcopy: answer", "asker", asker, "err", err)
	}
}

// answered hands a holder's answer to the fetch waiting for it.
func (c *Copier) answered(m *nats.Msg) {
	holder, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, hubwire.CopySentPrefix), ".")
	var ans hubwire.CopyAnswer
	if err := hubwire.DecodeCopy(m, &ans); err != nil {
		c.ignored.Add(1)
		c.log.Debug("hubcopy: answer ignored", "subject", m.Subject, "err", err)
		return
	}
	c.mu.Lock()
	ch := c.waiting[holder+"\x00"+ans.ID]
	c.mu.Unlock()
	if ch != nil {
		select {
		case ch <- ans:
		default:
		}
	}
}
