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

// queryQueue is the queue group of the nodes answering queries.
const queryQueue = "annexd-hub"

// seenFlush is how often the last-seen times of quiet hosts are written.
const seenFlush = 30 * time.Second

// Hub runs the embedded NATS server and keeps the view.
type Hub struct {
	cfg          Config
	known        map[string]bool // the hosts the configuration lists
	internalPass string
	selfPass     string
	// stale lists the copy buckets of pairs no longer configured, which
	// Run deletes.
	stale []string

	ready chan struct{}
	mu    sync.Mutex
	srv   *server.Server
	view  *view
	stats Stats
	// warned spaces the warnings of what stats counts.
	warned map[counted]warning
	// claiming counts the state requests whose claims are under way,
	// which end with claimCtx (claim.go).
	claiming sync.WaitGroup
	claimCtx context.Context
	claimKey []byte // the key of the hub's claims (Config.claimKey)
}

// New checks cfg and returns a hub ready to Run.
func New(cfg Config) (*Hub, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Hub{cfg: cfg, known: cfg.known(), internalPass: randomSecret(), selfPass: randomSecret(), ready: make(chan struct{}),
		stats: Stats{Dropped: map[Refusal]int64{}, Refused: map[Refusal]int64{}}, warned: map[counted]warning{}}, nil
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
	if err := h.cfg.checkDir(); err != nil {
		return err
	}
	key, err := h.cfg.claimKey()
	if err != nil {
		return err
	}
	h.claimKey = key
	v, err := openView(filepath.Join(h.cfg.Dir, "view.db"),
		viewConfig{stale: h.cfg.StaleAfter, now: h.cfg.Now, known: h.known, log: h.cfg.Logger, lease: h.cfg.claimLease})
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
	nc, err := nats.Connect("", nats.InProcessServer(srv), nats.UserInfo(internalUser, h.internalPass), nats.Name(internalUser),
		nats.CustomInboxPrefix(internalInbox))
	if err != nil {
		return fmt.Errorf("hub: connect in process: %w", err)
	}
	defer nc.Close()
	cctx, stopClaims := context.WithCancel(ctx)
	h.mu.Lock()
	h.claimCtx = cctx
	h.mu.Unlock()
	defer h.endClaims(stopClaims)
	cons, err := h.setupStream(ctx, nc)
	if err != nil {
		return err
	}
	if err := h.writeRestart(ctx, nc); err != nil {
		// The hub's downtime then counts as the holders' silence.
		h.cfg.Logger.Warn("hub: the start could not be noted in the stream; a publisher that asks first may take "+
			"over a host's name that was held before the hub stopped", "err", err)
	}
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	// A cluster node answers once its view has applied what the stream
	// held for it at start, so a node back from a stop does not answer
	// from an old view. A single hub has no better answer to give.
	open := func() error {
		if subs, err = h.serve(nc, v); err != nil {
			return err
		}
		h.mu.Lock()
		h.view = v
		h.mu.Unlock()
		close(h.ready)
		return nil
	}
	if h.cfg.Cluster == nil {
		if err := open(); err != nil {
			return err
		}
		open = nil
	}
	return h.consume(ctx, nc, cons, v, open)
}

// caughtUp reports whether the view's consumer has nothing left to
// deliver. No answer (the consumer's leader is being elected) is no.
func caughtUp(ctx context.Context, cons jetstream.Consumer) bool {
	info, err := cons.Info(ctx)
	return err == nil && info.NumPending == 0
}

func (h *Hub) start() (*server.Server, error) {
	h.stale = h.cfg.staleCopyStreams()
	opts, err := h.cfg.serverOptions(h.internalPass, h.selfPass, h.stale)
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

// setupStream creates or updates the stream and the views' consumers.
// A cluster node retries while the cluster forms.
func (h *Hub) setupStream(ctx context.Context, nc *nats.Conn) (jetstream.Consumer, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("hub: jetstream: %w", err)
	}
	for tries := 1; ; tries++ {
		cons, err := h.createStream(ctx, js)
		if err == nil || h.cfg.Cluster == nil || !retryable(err) || ctx.Err() != nil {
			return cons, err
		}
		switch {
		case tries == 1:
			h.cfg.Logger.Info("hub: the cluster forms: its stream waits for the other nodes and its first leaders (seconds); "+
				"hosts are answered once it is up", "err", err)
		case tries%10 == 0:
			h.cfg.Logger.Warn("hub: waiting for the cluster's other nodes", "err", err)
		}
		if !sleepCtx(ctx, time.Second) {
			return nil, ctx.Err()
		}
	}
}

func (h *Hub) createStream(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	// Buckets of hosts no longer configured go first: they hold disk
	// reserved for them, which the stream may need.
	if err := h.deleteStaleCopyBuckets(ctx, js); err != nil {
		return nil, err
	}
	// The copy buckets are made beside the stream and its consumers: on
	// a cluster each new group waits seconds for its first leader.
	buckets := make(chan error, 1)
	go func() { buckets <- h.createCopyBuckets(ctx, js) }()
	cons, err := h.createChanges(ctx, js)
	if berr := <-buckets; err == nil {
		err = berr
	}
	return cons, err
}

// createChanges makes or updates the stream of changes and the views'
// consumers, and returns this node's.
func (h *Hub) createChanges(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: hubwire.Stream, Subjects: []string{hubwire.ChangesPrefix + "*", hubwire.ClaimPrefix + "*"},
		Retention: h.cfg.retention(), Storage: jetstream.FileStorage, Replicas: h.cfg.replicas(),
		MaxBytes: h.cfg.MaxStreamBytes, Discard: jetstream.DiscardNew, Duplicates: duplicateWindow,
	})
	if err != nil {
		return nil, fmt.Errorf("hub: stream: %w", err)
	}
	// One batch in flight keeps each host's batches in order, also
	// across redeliveries.
	var own jetstream.Consumer
	// Its own consumer first: the others' are made by their nodes too.
	for _, name := range h.cfg.consumers() {
		cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: name, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1,
			AckWait: time.Minute, DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return nil, fmt.Errorf("hub: consumer %s: %w", name, err)
		}
		if name == h.cfg.ownConsumer() {
			own = cons
		}
	}
	return own, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// consume applies batches in stream order until ctx is done. It calls
// open, unless nil, once the consumer has nothing more to deliver: after
// a batch that leaves none pending, or when the consumer says so (it is
// asked every second until then).
func (h *Hub) consume(ctx context.Context, nc *nats.Conn, cons jetstream.Consumer, v *view, open func() error) error {
	var ask <-chan time.Time
	if open != nil {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		ask = t.C
		if caughtUp(ctx, cons) {
			if err := open(); err != nil {
				return err
			}
			open, ask = nil, nil
		}
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1))
	if err != nil {
		return fmt.Errorf("hub: consume: %w", err)
	}
	// Ending consume stops the reader, which hands back what it holds.
	rctx, cancel := context.WithCancel(ctx)
	read := make(chan struct{})
	defer func() { cancel(); <-read }()
	context.AfterFunc(rctx, it.Stop)
	flush := time.NewTicker(seenFlush)
	defer flush.Stop()
	msgs := make(chan jetstream.Msg)
	done := make(chan error, 1)
	go func() {
		defer close(read)
		for {
			m, err := it.Next()
			if errors.Is(err, jetstream.ErrNoHeartbeat) && rctx.Err() == nil {
				// The consumer's leader moved or is being elected: the
				// iterator asks again.
				h.cfg.Logger.Debug("hub: consumer heartbeat missed", "err", err)
				continue
			}
			if err != nil {
				done <- err
				return
			}
			select {
			case msgs <- m:
			case <-rctx.Done():
				// Delivered again at once to the next Run, not after
				// the ack wait.
				_ = m.Nak()
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
		case <-ask:
			if caughtUp(ctx, cons) {
				if err := open(); err != nil {
					return err
				}
				open, ask = nil, nil
			}
		case m := <-msgs:
			h.handle(nc, v, m)
			if md, err := m.Metadata(); open != nil && err == nil && md.NumPending == 0 {
				if err := open(); err != nil {
					return err
				}
				open, ask = nil, nil
			}
		}
	}
}

// handle applies one batch, acks it and tells the host what the view has.
// A batch that cannot be applied is dropped (terminated in the stream),
// logged and counted: the host resends what the view lacks, and the
// batches behind it are not held up.
func (h *Hub) handle(nc *nats.Conn, v *view, m jetstream.Msg) {
	if name, ok := strings.CutPrefix(m.Subject(), hubwire.ClaimPrefix); ok {
		h.handleClaim(v, name, m)
		return
	}
	name := strings.TrimPrefix(m.Subject(), hubwire.ChangesPrefix)
	drop := func(reason string, err error) {
		h.drop(name, reason, err)
		_ = m.Term()
	}
	if !v.known[name] {
		drop(DropUnknownHost, errUnknownHost)
		return
	}
	// A host's publisher gives every batch an id. A message without one
	// is a reply some host aimed at this subject, not the host's batch.
	if m.Headers().Get(jetstream.MsgIDHeader) == "" {
		drop(DropNoID, errors.New("no message id: not published by the host"))
		return
	}
	inst := instanceOf(m.Headers().Get(hubwire.InstanceHeader))
	if !v.fromHolder(name, inst) {
		drop(DropRival, fmt.Errorf("from publisher %x, not the one that holds the name (a cloned machine?)", inst))
		return
	}
	b, err := hubwire.Unmarshal(m.Data())
	if err == nil {
		b.Chain, err = hubwire.ParseChain(m.Headers().Get(hubwire.ChainHeader))
	}
	if err != nil {
		drop(DropUndecodable, err)
		return
	}
	var at time.Time
	if md, err := m.Metadata(); err == nil {
		at = md.Timestamp
	}
	res, err := v.applyFrom(name, &b, inst, at)
	if err != nil {
		drop(DropUnappliable, err)
		return
	}
	switch {
	case res.note == NoteForeign:
		// Acked all the same: the ack tells the sender the hub's chain,
		// and it resends its index whole.
		if n := h.countDrop(name, DropForeign); n > 0 {
			h.cfg.Logger.Warn("hub: batch of another history of this host's index: a copy of its state publishes under its name, "+
				"or its index was restored from a backup; not applied, and the host resends its index whole",
				"host", name, "first", b.First, "last", b.Last, "dropped", n)
		}
	case res.note != "":
		h.cfg.Logger.Debug("hub: batch skipped", "host", name, "kind", b.Kind, "first", b.First, "last", b.Last, "why", res.note)
	}
	if err := m.Ack(); err != nil {
		h.cfg.Logger.Warn("hub: ack", "host", name, "err", err)
	}
	if data, err := json.Marshal(res.state); err == nil {
		_ = nc.Publish(hubwire.AckPrefix+name, data)
	}
}

// drop counts and logs a message of host name dropped for reason.
func (h *Hub) drop(name, reason string, err error) {
	if n := h.countDrop(name, reason); n > 0 {
		h.cfg.Logger.Warn("hub: batch dropped", "host", name, "why", reason, "err", err, "dropped", n)
	} else {
		h.cfg.Logger.Debug("hub: batch dropped", "host", name, "why", reason, "err", err)
	}
}

// serve answers state requests and queries. The subject names the host
// that asks, as its permissions allow no other; the answer goes into that
// host's own inbox, or nowhere.
func (h *Hub) serve(nc *nats.Conn, v *view) ([]*nats.Subscription, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("hub: jetstream: %w", err)
	}
	queries := map[string]func(asker string, data []byte) any{
		hubwire.QueryWhereis: func(asker string, data []byte) any {
			var req hubwire.WhereisRequest
			if err := json.Unmarshal(data, &req); err != nil {
				return hubwire.WhereisReply{Error: fmt.Sprintf("%v: %v", ErrQuery, err)}
			}
			c, err := v.whereis(asker, req)
			return hubwire.WhereisReply{Content: c, Error: errText(err)}
		},
		hubwire.QueryDups: func(_ string, data []byte) any {
			var req hubwire.DupsRequest
			if err := json.Unmarshal(data, &req); err != nil {
				return hubwire.ListReply{Error: fmt.Sprintf("%v: %v", ErrQuery, err)}
			}
			r, err := v.dups(req)
			r.Error = errText(err)
			return r
		},
		hubwire.QueryCopies: func(_ string, data []byte) any {
			var req hubwire.CopiesRequest
			if err := json.Unmarshal(data, &req); err != nil {
				return hubwire.ListReply{Error: fmt.Sprintf("%v: %v", ErrQuery, err)}
			}
			r, err := v.copies(req)
			r.Error = errText(err)
			return r
		},
		hubwire.QueryHosts: func(string, []byte) any {
			return hubwire.HostsReply{Hosts: v.states()}
		},
	}
	// Every node hears a host's state requests, which say it is alive and
	// claim its name (claim.go); one node of the cluster answers each
	// query.
	state, err := nc.Subscribe(hubwire.StatePrefix+"*", func(m *nats.Msg) {
		name := strings.TrimPrefix(m.Subject, hubwire.StatePrefix)
		if !h.asked(v, name, m) {
			return
		}
		h.onState(nc, js, v, name, m)
	})
	if err != nil {
		return nil, fmt.Errorf("hub: subscribe %s: %w", hubwire.StatePrefix, err)
	}
	subs := []*nats.Subscription{state}
	reads := newCopyReader(nc, js, h.known)
	query, err := nc.QueueSubscribe(hubwire.QueryPrefix+"*.*", queryQueue, func(m *nats.Msg) {
		name, kind, _ := strings.Cut(strings.TrimPrefix(m.Subject, hubwire.QueryPrefix), ".")
		if !h.asked(v, name, m) {
			return
		}
		if kind == hubwire.QueryCopyRead {
			reads.serve(context.Background(), name, m) // answers in several parts, on its own goroutine
			return
		}
		fn, ok := queries[kind]
		if !ok {
			h.respond(nc, m, hubwire.ListReply{Error: fmt.Sprintf("%v: no query %q", ErrQuery, kind)})
			return
		}
		h.respond(nc, m, fn(name, m.Data))
	})
	if err != nil {
		return subs, fmt.Errorf("hub: subscribe %s: %w", hubwire.QueryPrefix, err)
	}
	return append(subs, query), nc.Flush()
}

// asked reports whether m is a request the hub answers: from a host the
// configuration lists, with a reply subject in that host's own inbox. A
// reply aimed elsewhere (another host's acks or subjects, a phantom
// host's state) is refused and counted; so is a request without one,
// which is how a stream's reply that a host aimed here arrives.
func (h *Hub) asked(v *view, name string, m *nats.Msg) bool {
	why := ""
	switch {
	case !v.known[name]:
		why = RefuseUnknownHost
	case !hubwire.InboxOf(name, m.Reply):
		why = RefuseReplyElsewhere
	default:
		return true
	}
	if n := h.countRefusal(name, why); n > 0 {
		h.cfg.Logger.Warn("hub: request refused", "subject", m.Subject, "reply", m.Reply, "why", why, "refused", n)
	} else {
		h.cfg.Logger.Debug("hub: request refused", "subject", m.Subject, "reply", m.Reply, "why", why)
	}
	return false
}

// respond sends r to m's reply subject, which asked checked.
func (h *Hub) respond(nc *nats.Conn, m *nats.Msg, r any) {
	data, err := json.Marshal(r)
	if err != nil {
		data, _ = json.Marshal(hubwire.ListReply{Error: err.Error()})
	}
	if err := nc.Publish(m.Reply, data); err != nil {
		h.cfg.Logger.Warn("hub: reply", "subject", m.Subject, "err", err)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
