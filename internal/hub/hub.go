package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/annexd/annexd/internal/hubwire"
)

// consumerName is the hub's durable consumer of the stream.
const consumerName = "view"

// duplicateWindow is how long the stream remembers message ids. Retries
// within it store nothing; later ones are skipped by the view's sequence.
const duplicateWindow = 10 * time.Minute

// seenFlush is how often the last-seen times of quiet hosts are written.
const seenFlush = 30 * time.Second

// Hub runs the embedded NATS server and keeps the view.
type Hub struct {
	cfg          Config
	internalPass string
	selfPass     string

	ready chan struct{}
	mu    sync.Mutex
	srv   *server.Server
	view  *view
}

// New checks cfg and returns a hub ready to Run.
func New(cfg Config) (*Hub, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Hub{cfg: cfg, internalPass: randomSecret(), selfPass: randomSecret(), ready: make(chan struct{})}, nil
}

// Ready is closed once the hub accepts connections.
func (h *Hub) Ready() <-chan struct{} { return h.ready }

// ClientURL is the address hosts dial, once Ready (the chosen port when
// Listen asked for any).
func (h *Hub) ClientURL() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.srv == nil {
		return ""
	}
	return h.srv.ClientURL()
}

// SelfOptions are the connection options of the hub machine's own
// annexd: in process, as Config.Self. Valid once Ready.
func (h *Hub) SelfOptions() []nats.Option {
	h.mu.Lock()
	defer h.mu.Unlock()
	return []nats.Option{nats.InProcessServer(h.srv), nats.UserInfo(h.cfg.Self, h.selfPass),
		nats.CustomInboxPrefix(hubwire.InboxPrefix + h.cfg.Self)}
}

// Run serves until ctx is done, then shuts the server down and closes the
// view. Batches the stream holds but the view has not applied stay in the
// stream for the next Run.
func (h *Hub) Run(ctx context.Context) error {
	v, err := openView(filepath.Join(h.cfg.Dir, "view.db"), h.cfg.StaleAfter, h.cfg.Now)
	if err != nil {
		return err
	}
	defer v.close()
	srv, err := h.start()
	if err != nil {
		return err
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	nc, err := nats.Connect("", nats.InProcessServer(srv), nats.UserInfo(internalUser, h.internalPass), nats.Name(internalUser))
	if err != nil {
		return fmt.Errorf("hub: connect in process: %w", err)
	}
	defer nc.Close()
	cons, err := h.setupStream(ctx, nc)
	if err != nil {
		return err
	}
	subs, err := h.serve(nc, v)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	h.mu.Lock()
	h.view = v
	h.mu.Unlock()
	close(h.ready)
	return h.consume(ctx, nc, cons, v)
}

func (h *Hub) start() (*server.Server, error) {
	opts, err := h.cfg.serverOptions(h.internalPass, h.selfPass)
	if err != nil {
		return nil, err
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	fatal := make(chan string, 1)
	srv.SetLoggerV2(serverLog{log: h.cfg.Logger, fatal: fatal}, false, false, false)
	go srv.Start()
	ready := make(chan bool, 1)
	go func() { ready <- srv.ReadyForConnections(30 * time.Second) }()
	select {
	case ok := <-ready:
		if !ok {
			srv.Shutdown()
			return nil, fmt.Errorf("%w: the NATS server did not start listening on %q", ErrListen, h.cfg.Listen)
		}
	case msg := <-fatal:
		srv.Shutdown()
		return nil, fmt.Errorf("%w on %q: %s", ErrListen, h.cfg.Listen, msg)
	}
	h.mu.Lock()
	h.srv = srv
	h.mu.Unlock()
	return srv, nil
}

// setupStream creates or updates the stream and the view's consumer.
func (h *Hub) setupStream(ctx context.Context, nc *nats.Conn) (jetstream.Consumer, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("hub: jetstream: %w", err)
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: hubwire.Stream, Subjects: []string{hubwire.ChangesPrefix + "*"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
		MaxBytes: h.cfg.MaxStreamBytes, Discard: jetstream.DiscardNew, Duplicates: duplicateWindow,
	})
	if err != nil {
		return nil, fmt.Errorf("hub: stream: %w", err)
	}
	// One batch in flight keeps each host's batches in order, also
	// across redeliveries.
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: consumerName, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1,
		AckWait: time.Minute, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("hub: consumer: %w", err)
	}
	return cons, nil
}

// consume applies batches in stream order until ctx is done.
func (h *Hub) consume(ctx context.Context, nc *nats.Conn, cons jetstream.Consumer, v *view) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(1))
	if err != nil {
		return fmt.Errorf("hub: consume: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	flush := time.NewTicker(seenFlush)
	defer flush.Stop()
	msgs := make(chan jetstream.Msg)
	done := make(chan error, 1)
	go func() {
		for {
			m, err := it.Next()
			if err != nil {
				done <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			_ = v.flushSeen()
			return nil
		case err := <-done:
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				_ = v.flushSeen()
				return nil
			}
			return fmt.Errorf("hub: consume: %w", err)
		case <-flush.C:
			if err := v.flushSeen(); err != nil {
				h.cfg.Logger.Warn("hub: write last-seen times", "err", err)
			}
		case m := <-msgs:
			h.handle(nc, v, m)
		}
	}
}

// handle applies one batch, acks it and tells the host what the view has.
func (h *Hub) handle(nc *nats.Conn, v *view, m jetstream.Msg) {
	name := strings.TrimPrefix(m.Subject(), hubwire.ChangesPrefix)
	b, err := hubwire.Unmarshal(m.Data())
	if err != nil {
		h.cfg.Logger.Warn("hub: batch dropped", "host", name, "err", err)
		_ = m.Term()
		return
	}
	res, err := v.apply(name, &b)
	if err != nil {
		h.cfg.Logger.Error("hub: apply batch", "host", name, "err", err)
		_ = m.NakWithDelay(5 * time.Second)
		return
	}
	if res.note != "" {
		h.cfg.Logger.Debug("hub: batch skipped", "host", name, "kind", b.Kind, "first", b.First, "last", b.Last, "why", res.note)
	}
	if err := m.Ack(); err != nil {
		h.cfg.Logger.Warn("hub: ack", "host", name, "err", err)
	}
	if data, err := json.Marshal(res.state); err == nil {
		_ = nc.Publish(hubwire.AckPrefix+name, data)
	}
}

// serve answers state requests and queries.
func (h *Hub) serve(nc *nats.Conn, v *view) ([]*nats.Subscription, error) {
	handlers := map[string]nats.MsgHandler{
		hubwire.StatePrefix + "*": func(m *nats.Msg) {
			name := strings.TrimPrefix(m.Subject, hubwire.StatePrefix)
			v.heard(name)
			reply(m, v.state(name), nil)
		},
		hubwire.QueryPrefix + hubwire.QueryWhereis: func(m *nats.Msg) {
			var req hubwire.WhereisRequest
			if err := json.Unmarshal(m.Data, &req); err != nil {
				reply(m, hubwire.WhereisReply{}, fmt.Errorf("%w: %v", ErrQuery, err))
				return
			}
			c, err := v.whereis(req)
			reply(m, hubwire.WhereisReply{Content: c}, err)
		},
		hubwire.QueryPrefix + hubwire.QueryDups: func(m *nats.Msg) {
			var req hubwire.DupsRequest
			if err := json.Unmarshal(m.Data, &req); err != nil {
				reply(m, hubwire.ListReply{}, fmt.Errorf("%w: %v", ErrQuery, err))
				return
			}
			r, err := v.dups(req)
			reply(m, r, err)
		},
		hubwire.QueryPrefix + hubwire.QueryCopies: func(m *nats.Msg) {
			var req hubwire.CopiesRequest
			if err := json.Unmarshal(m.Data, &req); err != nil {
				reply(m, hubwire.ListReply{}, fmt.Errorf("%w: %v", ErrQuery, err))
				return
			}
			r, err := v.copies(req)
			reply(m, r, err)
		},
		hubwire.QueryPrefix + hubwire.QueryHosts: func(m *nats.Msg) {
			reply(m, hubwire.HostsReply{Hosts: v.states()}, nil)
		},
	}
	var subs []*nats.Subscription
	for subj, fn := range handlers {
		s, err := nc.Subscribe(subj, fn)
		if err != nil {
			return subs, fmt.Errorf("hub: subscribe %s: %w", subj, err)
		}
		subs = append(subs, s)
	}
	return subs, nc.Flush()
}

// reply answers m with r, or with err in r's Error field.
func reply(m *nats.Msg, r any, err error) {
	if err != nil {
		switch x := r.(type) {
		case hubwire.WhereisReply:
			x.Error = err.Error()
			r = x
		case hubwire.ListReply:
			x.Error = err.Error()
			r = x
		}
	}
	data, merr := json.Marshal(r)
	if merr != nil {
		data, _ = json.Marshal(hubwire.ListReply{Error: merr.Error()})
	}
	_ = m.Respond(data)
}
