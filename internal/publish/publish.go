// Package publish sends a host's change log to the hub: batches on the
// host's own subject, resumed from what the hub has applied, with the
// local index as the outbox.
//
// The hub's view, not the stream, says what is acknowledged: a change is
// trimmed from the local log only once the view has applied it (the
// hub's ack, or its answer to a state request), and only on a state that
// names this host. A batch the stream accepted but lost is therefore sent
// again. Retries of one batch carry one message id, so the stream stores
// them once within its duplicate window; the view skips what it has by
// sequence after that. The id is keyed by a secret of this publisher, so
// no other host can send a message under it first and have the stream
// drop this host's batch as a duplicate.
//
// When the hub lacks this index (another index id, a gap it cannot fill,
// a log trimmed past what it has), the publisher resends the index whole,
// and the hub replaces the host's old records once the resend is
// complete. Nothing here blocks the index: the publisher reads in short
// read transactions and trims in small writes, and while the hub is
// unreachable it only waits.
package publish

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/annexd/annexd/internal/hubwire"
	"github.com/annexd/annexd/store"
)

// Store is what the publisher needs of the index.
type Store interface {
	ChangeLog() (store.LogState, error)
	ChangesAfter(after uint64, max int) ([]store.Logged, store.LogState, error)
	TrimChanges(ctx context.Context, seq uint64) error
	ResetChanges() error
	SnapshotChanges(ctx context.Context, fn func(store.Logged) error) (store.LogState, error)
	GetMeta(name string) ([]byte, bool, error)
	PutMeta(ctx context.Context, name string, v []byte) error
}

// Config configures a publisher. Name, HostID and URL (or an in-process
// option) are required.
type Config struct {
	// Name is the host's name at the hub: its credentials' user.
	Name string
	// HostID is the host's UUID (LoadHostID).
	HostID [16]byte
	// URL is the hub's address, e.g. tls://nas:4222, or a cluster's
	// nodes separated by commas: the connection fails over between them.
	URL string
	// Options carry the credentials and TLS (nats.UserInfo, nats.Nkey,
	// nats.RootCAs) or an in-process connection.
	Options []nats.Option
	// Batch is the most changes one message carries. Default 4096, at
	// most hubwire.MaxEntries.
	Batch int
	// Poll is how often the log is read for new changes. Default 500 ms.
	Poll time.Duration
	// Heartbeat is how often the hub hears from an idle host. Default 1 min.
	Heartbeat time.Duration
	// Timeout bounds one publish or request. Default 10 s.
	Timeout time.Duration
	// Logger receives the publisher's problems. Default: discard.
	Logger *slog.Logger
	// Instance names this publisher at the hub (LoadInstance). Default:
	// a new one, kept in memory.
	Instance *Instance
}

func (c *Config) fill() error {
	if err := hubwire.CheckName(c.Name); err != nil {
		return err
	}
	if c.HostID == [16]byte{} {
		return errors.New("publish: no host id")
	}
	if c.Batch <= 0 {
		c.Batch = 4096
	}
	c.Batch = min(c.Batch, hubwire.MaxEntries)
	if c.Poll <= 0 {
		c.Poll = 500 * time.Millisecond
	}
	if c.Heartbeat <= 0 || c.Heartbeat > hubwire.MaxHeartbeat {
		// Silent longer, the host would lose its name at the hub to a
		// copy of it (hub's claim.go).
		c.Heartbeat = hubwire.MaxHeartbeat
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Instance == nil {
		c.Instance, _ = LoadInstance("")
	}
	return nil
}

// Status is how the link to the hub stands.
type Status struct {
	Connected bool      `json:"connected"`
	IndexID   string    `json:"index_id"`
	Seq       uint64    `json:"seq"`       // the index's last change
	Published uint64    `json:"published"` // the last change the hub's stream took
	Acked     uint64    `json:"acked"`     // the last change the hub's view applied
	Lag       uint64    `json:"lag"`       // changes not yet applied by the hub
	Resending bool      `json:"resending"` // a whole resend is under way
	Resends   int64     `json:"resends"`   // whole resends begun since start
	LastAck   time.Time `json:"last_ack,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	// Refused is the hub's last refusal of what this host sent or
	// subscribed to under its name (a permissions violation): its
	// credentials are another host's. Empty once the hub answers it.
	Refused string `json:"refused,omitempty"`
	// Rival says that another publisher spoke under this host's name
	// lately (a cloned machine, a copied configuration); RivalHolds that
	// it holds the name, so this host's changes wait (hub's claim.go).
	Rival      string `json:"rival,omitempty"`
	RivalHolds bool   `json:"rival_holds,omitempty"`
}

// maxBatchBytes bounds one batch's entries, well below NATS's default
// limit of 1 MiB a message: paths may be long.
const maxBatchBytes = 512 << 10

// entryBytes is about what an entry adds to a batch.
func entryBytes(l *store.Logged) int { return len(l.Path) + len(l.Digest) + 16 }

// setIndex makes the sequences count changes of index id: another index
// starts from nothing published or acknowledged.
func (s *Status) setIndex(id string) {
	if s.IndexID != id {
		s.IndexID, s.Published, s.Acked, s.LastAck = id, 0, 0, time.Time{}
	}
}

// Publisher follows the index's change log and publishes it.
type Publisher struct {
	st  Store
	cfg Config
	log *slog.Logger
	// idKey keys the batches' message ids (hubwire.Batch.MsgID).
	idKey []byte

	wake chan struct{}
	mu   sync.Mutex
	stat Status
	ack  hubwire.State // the hub's last word on this host
	acks chan struct{}
	up   chan struct{} // the connection came (back) up
	nc   *nats.Conn    // while Run runs
	// foreign counts states naming another host since warned.
	foreign int
	warned  time.Time
	refusal error // the hub's refusal of this host's name (stat.Refused), or nil
	// held is the hub's last word on this host (held.go), heldDirty
	// until it is written to the index.
	held      heldMark
	heldDirty bool
	heldW     sync.Mutex // one writeHeld at a time
	// anchor is the index's chain at the hub's last checked change; kept
	// is the one written to the index with held (chain.go).
	anchor, kept anchor
	// divergedAt is when the hub last held another history of the index.
	divergedAt time.Time
	// self is this publisher's instance id (cfg.Instance's, until renew);
	// replaced are the hub's indexes of this host, by id, that it
	// replaced with a whole resend, and the resend epoch they had (twin.go).
	self     uint64
	replaced map[string]map[uint64]bool
	// behind counts syncs in a row that found the hub behind (chain.go);
	// resentAt is when the latest whole resend was sent, resentSeen
	// whether a state showed it applied since (chain.go awaiting).
	behind     int
	resentAt   time.Time
	resentSeen bool
}

// Errors of the link.
var (
	// ErrHubLost: the hub stopped answering during a sync.
	ErrHubLost = errors.New("publish: hub lost")
	// ErrRefused: the hub refused this host's credentials. The publisher
	// keeps trying, less and less often, in case the hub's are fixed.
	ErrRefused = errors.New("publish: the hub refused this host's credentials")
	// ErrRival: another publisher holds this host's name at the hub. The
	// publisher asks again, less and less often, until it stops.
	ErrRival = errors.New("publish: another machine publishes under this host's name")
	// errTakenOver: this publisher took the host's name over from
	// another, whose records the hub holds; the index is resent whole.
	errTakenOver = errors.New("publish: the hub held this host's records from another publisher; resending the index whole")
	// errAhead: the hub holds more of this index than it has (ahead).
	errAhead = errors.New("publish: the hub holds more changes of this index than it has (another machine under this host's name?)")
)

// New returns a publisher of st's changes.
func New(st Store, cfg Config) (*Publisher, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	idKey := make([]byte, 32)
	_, _ = rand.Read(idKey)
	held, a := loadHeld(st)
	return &Publisher{st: st, cfg: cfg, log: cfg.Logger, idKey: idKey, wake: make(chan struct{}, 1), acks: make(chan struct{}, 1),
		up: make(chan struct{}, 1), held: held, anchor: a, kept: a, self: cfg.Instance.ID, replaced: map[string]map[uint64]bool{}}, nil
}

// Notify says the log has new changes, so they go out before the next poll.
func (p *Publisher) Notify() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Conn returns the connection to the hub while Run runs, else nil. Queries
// to the hub (hub.NewClient) may share it.
func (p *Publisher) Conn() *nats.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nc
}

// Status returns the link's state. The index's last change is read from
// the index, so the lag grows while the hub is away.
func (p *Publisher) Status() Status {
	local, err := p.st.ChangeLog()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stat
	if err == nil && local.IndexID.String() == s.IndexID {
		s.Seq = local.Seq
	}
	if s.Seq > s.Acked {
		s.Lag = s.Seq - s.Acked
	}
	return s
}

func (p *Publisher) setStatus(fn func(s *Status)) {
	p.mu.Lock()
	fn(&p.stat)
	p.mu.Unlock()
}

// Run publishes until ctx is done, and returns nil then. A hub that cannot
// be reached is retried forever, with backoff; an index without a change
// log, or closed, ends Run with that error.
func (p *Publisher) Run(ctx context.Context) error {
	opts := append([]nats.Option{
		nats.Name("annexd " + p.cfg.Name), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
		nats.CustomReconnectDelay(p.reconnectDelay), nats.ReconnectBufSize(-1), nats.IgnoreAuthErrorAbort(),
		nats.CustomInboxPrefix(hubwire.InboxPrefix + p.cfg.Name),
		nats.ConnectHandler(func(*nats.Conn) { p.connected(true) }),
		nats.ReconnectHandler(func(*nats.Conn) { p.connected(true) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { p.connected(false) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				err = p.refused(err)
			}
			p.log.Warn("publish: hub connection", "err", err)
			p.setStatus(func(s *Status) { s.LastError = err.Error() })
		}),
	}, p.cfg.Options...)
	nc, err := nats.Connect(p.cfg.URL, opts...)
	if err != nil {
		return fmt.Errorf("publish: connect to %s: %w", p.cfg.URL, err)
	}
	defer nc.Close()
	hctx, stopHeld := context.WithCancel(context.Background())
	heldDone := make(chan struct{})
	go func() { defer close(heldDone); p.keepHeld(hctx) }()
	defer func() { stopHeld(); <-heldDone }()
	p.mu.Lock()
	p.nc = nc
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.nc = nil
		p.mu.Unlock()
	}()
	p.connected(nc.IsConnected())
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	sub, err := nc.Subscribe(hubwire.AckPrefix+p.cfg.Name, func(m *nats.Msg) {
		// The hub publishes an ack bare. A stream's message that some
		// host's consumer aimed here carries a reply subject, a direct
		// read's answer headers: neither is the hub's word.
		if m.Reply != "" || len(m.Header) != 0 {
			p.foreignState("(a stream's message)")
			return
		}
		var st hubwire.State
		if json.Unmarshal(m.Data, &st) == nil {
			p.heard(st)
		}
	})
	if err != nil {
		return fmt.Errorf("publish: subscribe to acks: %w", err)
	}
	defer sub.Unsubscribe()
	l := &link{p: p, nc: nc, js: js}
	backoff := time.Second
	for ctx.Err() == nil {
		err := l.sync(ctx)
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, store.ErrNoChanges) || errors.Is(err, store.ErrClosed) {
			return fmt.Errorf("publish: %w", err)
		}
		level := slog.LevelInfo
		if errors.Is(err, ErrRefused) || errors.Is(err, ErrRival) || errors.Is(err, errAhead) || errors.Is(err, errDiverged) || errors.Is(err, errTwin) {
			level = slog.LevelWarn
		}
		p.log.Log(ctx, level, "publish: hub sync interrupted", "err", err, "retry", backoff)
		p.setStatus(func(s *Status) { s.LastError, s.Resending = err.Error(), false })
		if errors.Is(err, errTakenOver) {
			backoff = time.Second
			continue // resend at once
		}
		if !p.sleep(ctx, backoff) {
			break
		}
		backoff = min(2*backoff, time.Minute)
		if l.progress {
			backoff, l.progress = time.Second, false
		}
	}
	return nil
}

// reconnectDelay is a second between attempts to reach the hub, growing
// to a minute while the hub refuses the credentials (a bcrypt check
// costs the hub tens of milliseconds of CPU).
func (p *Publisher) reconnectDelay(attempts int) time.Duration {
	if nc := p.Conn(); nc == nil || !errors.Is(nc.LastError(), nats.ErrAuthorization) {
		return time.Second
	}
	return min(time.Second<<min(attempts, 6), time.Minute)
}

// notConnected says why the connection is down.
func notConnected(nc *nats.Conn) error {
	err := nc.LastError()
	switch {
	case errors.Is(err, nats.ErrAuthorization):
		return fmt.Errorf("%w (%v)", ErrRefused, err)
	case err != nil:
		return fmt.Errorf("%w: not connected: %v", ErrHubLost, err)
	}
	return fmt.Errorf("%w: not connected", ErrHubLost)
}

// sleep waits d, or less when the connection comes back up; it reports
// false when ctx ended.
func (p *Publisher) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.up:
	case <-ctx.Done():
		return false
	}
	return true
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (p *Publisher) connected(up bool) {
	p.setStatus(func(s *Status) { s.Connected = up })
	if up {
		select {
		case p.up <- struct{}{}:
		default:
		}
	}
}

// heard takes the hub's word on what it applied of this host, and
// reports whether it did: a state that names another host is not this
// host's, whatever its numbers say.
func (p *Publisher) heard(st hubwire.State) bool {
	if st.Name != p.cfg.Name {
		p.foreignState(st.Name)
		return false
	}
	mine := st.Instance == 0 || st.Instance == p.selfID()
	p.mu.Lock()
	p.stat.Refused, p.refusal = "", nil // the hub answers this host under its name
	p.stat.RivalHolds = !mine
	p.stat.Rival = ""
	switch {
	case !mine:
		p.stat.Rival = fmt.Sprintf("another machine publishes under this host's name (publisher %x); this host's changes wait", st.Instance)
	case !st.Rival.IsZero():
		p.stat.Rival = fmt.Sprintf("another machine asked to publish under this host's name at %s; the hub refuses it (a copy of this machine?)",
			st.Rival.Format(time.RFC3339))
	case time.Since(p.divergedAt) < divergedNote:
		p.stat.Rival = divergedText(p.divergedAt)
	}
	if mine {
		// Another publisher's state is not this host's: what the hub
		// applied of it says nothing of this host's changes. This one's
		// counts once its chain is checked (chain.go).
		p.ack = st
		p.sawResend(st)
	}
	p.mu.Unlock()
	if mine && st.Instance != 0 {
		p.noteHeld(st.Instance, st.Seq)
	}
	select {
	case p.acks <- struct{}{}:
	default:
	}
	return true
}

// refused notes the hub's refusal of what this host sent or subscribed
// to under its name, and returns it as an error that says so.
func (p *Publisher) refused(violation error) error {
	err := fmt.Errorf("%w as %q: they are another host's (%v)", ErrRefused, p.cfg.Name, violation)
	p.mu.Lock()
	p.stat.Refused, p.refusal = err.Error(), err
	p.mu.Unlock()
	return err
}

// refusedNow returns the hub's refusal of this host's name, until the hub
// answers it, or nil.
func (p *Publisher) refusedNow() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refusal
}

// foreignState warns, at most once a minute, of states that name another
// host: a host's credentials used to aim replies at this one.
func (p *Publisher) foreignState(name string) {
	p.mu.Lock()
	p.foreign++
	n, warn := p.foreign, time.Since(p.warned) >= time.Minute
	if warn {
		p.foreign, p.warned = 0, time.Now()
	}
	p.mu.Unlock()
	if warn {
		p.log.Warn("publish: ignored hub states that name another host; some host's credentials may be misused", "named", name, "count", n)
	}
}

// link is one connection's sync state.
type link struct {
	p        *Publisher
	nc       *nats.Conn
	js       jetstream.JetStream
	trimmed  uint64
	progress bool          // something was published since the last failure
	beat     string        // the hub's state at the last heartbeat
	behind   bool          // it lacked changes sent by then
	chain    hubwire.Chain // the index's chain at the change last published
	checked  hubwire.State // the last ack checked (checkAck)
	// sent is the chain at the end of each batch published and not yet
	// acknowledged (sentChain).
	sent map[uint64]hubwire.Chain
	// fromOther: the last state answered a publisher that took the name
	// over from another, or whose index last saw another hold it.
	fromOther bool
	// heldBefore is the hub's mark as the index kept it before the last
	// state's answer (held.go).
	heldBefore heldMark
	away       int // heartbeats in a row that found another index (elsewhere)
}

// sync asks the hub where it stands, resends whole when it must, then
// follows the log until something fails.
func (l *link) sync(ctx context.Context) error {
	p := l.p
	local, err := p.st.ChangeLog()
	if err != nil {
		return err
	}
	p.setStatus(func(s *Status) { s.setIndex(local.IndexID.String()); s.Seq = local.Seq })
	hub, err := l.state(ctx)
	if err != nil {
		return err
	}
	from, whole := resumePoint(local, hub)
	if !whole {
		if l.chain, whole, err = l.resumeChain(local, hub); err != nil {
			return err
		}
	}
	if hub.IndexID == local.IndexID.String() && hub.Complete && hub.Seq > local.Seq {
		// The hub has changes this index never made: a restored backup.
		p.log.Warn("publish: the hub holds changes this index does not; resending it whole under a new index id", "hub_seq", hub.Seq, "seq", local.Seq)
		p.noteDiverged()
		if err := p.resetIndex(hub); err != nil {
			return err
		}
		whole = true
	}
	if whole {
		if err := p.replacing(hub, l.fromOther); err != nil {
			return err
		}
		if from, err = l.resend(ctx, hub); err != nil {
			return err
		}
	}
	return l.follow(ctx, from)
}

// resumePoint says after which change the log resumes, or that the index
// must be resent whole.
func resumePoint(local store.LogState, hub hubwire.State) (uint64, bool) {
	if !hub.Complete || hub.IndexID != local.IndexID.String() || hub.Seq > local.Seq || hub.Seq+1 < local.Floor {
		return 0, true
	}
	return hub.Seq, false
}

// state asks the hub what it has of this host; the request also tells it
// the host is alive.
func (l *link) state(ctx context.Context) (hubwire.State, error) {
	if !l.nc.IsConnected() {
		return hubwire.State{}, notConnected(l.nc)
	}
	ctx, cancel := context.WithTimeout(ctx, l.p.cfg.Timeout)
	defer cancel()
	self := l.p.selfID()
	body, _ := json.Marshal(hubwire.StateRequest{Instance: self})
	m, err := l.nc.RequestWithContext(ctx, hubwire.StatePrefix+l.p.cfg.Name, body)
	if err != nil {
		if refused := l.p.refusedNow(); refused != nil {
			return hubwire.State{}, refused
		}
		return hubwire.State{}, fmt.Errorf("%w: state: %v", ErrHubLost, err)
	}
	var st hubwire.State
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return st, fmt.Errorf("publish: state reply: %w", err)
	}
	held := l.p.lastHeld() // before heard notes this answer
	l.heldBefore = held
	if !l.p.heard(st) {
		return hubwire.State{}, fmt.Errorf("%w: the hub's state names %q, not this host", ErrHubLost, st.Name)
	}
	if st.Instance != 0 && st.Instance != self {
		return st, fmt.Errorf("%w %q (publisher %x, heard %s): a copy of this machine or of its configuration, "+
			"or this machine's publisher from before a reboot, until the hub has not heard it for 3 minutes. "+
			"Give each machine its own name and credentials; this host's changes wait in its index",
			ErrRival, l.p.cfg.Name, st.Instance, st.LastSeen.Format(time.RFC3339))
	}
	l.fromOther = st.Previous != 0 || held.id != 0 && held.id != self
	if (st.Chain.IsZero() || !l.p.anchored(l.p.Status().IndexID)) && foreignHistory(st, held, self) {
		// Histories are told apart by their chains (chain.go); without
		// one on either side, by the publisher that held the name.
		l.p.log.Warn("publish: the hub held this host's records from another publisher (a copy of this machine?); resending the index whole",
			"previous", fmt.Sprintf("%x", st.Previous), "hub_seq", st.Seq, "last_held", fmt.Sprintf("%x", held.id), "last_held_seq", held.seq)
		if err := l.p.resetIndex(st); err != nil {
			return st, err
		}
		return st, errTakenOver
	}
	return st, nil
}

// foreignHistory reports whether what the hub holds of this host, by its
// state st for publisher own, may be another machine's history under the
// same index id and sequence numbers: own took the name over from a
// publisher (st.Previous) other than the one the index last saw hold it,
// or at another change; or the hub names own while the index's mark
// names another and no takeover was heard (its answer was lost: the
// request timed out as the hub made it).
func foreignHistory(st hubwire.State, held heldMark, own uint64) bool {
	if st.Previous != 0 {
		return st.Previous != held.id || st.Seq != held.seq
	}
	return st.Instance == own && held.id != 0 && held.id != own
}

// publish sends one batch, retrying it under the same message id.
func (l *link) publish(ctx context.Context, b *hubwire.Batch) error {
	msg := &nats.Msg{Subject: hubwire.ChangesPrefix + l.p.cfg.Name, Data: b.Marshal(), Header: nats.Header{}}
	msg.Header.Set(hubwire.InstanceHeader, strconv.FormatUint(l.p.selfID(), 16))
	if !b.Chain.IsZero() {
		msg.Header.Set(hubwire.ChainHeader, b.Chain.String())
	}
	var err error
	for attempt := range 3 {
		if attempt > 0 && !sleep(ctx, time.Duration(attempt)*time.Second) {
			return ctx.Err()
		}
		actx, cancel := context.WithTimeout(ctx, l.p.cfg.Timeout)
		_, err = l.js.PublishMsg(actx, msg, jetstream.WithMsgID(b.MsgID(l.p.idKey)), jetstream.WithExpectStream(hubwire.Stream))
		cancel()
		if err == nil {
			l.progress = true
			return nil
		}
		if ctx.Err() != nil || !l.nc.IsConnected() {
			break
		}
	}
	return fmt.Errorf("%w: publish %s %d-%d: %v", ErrHubLost, b.Kind, b.First, b.Last, err)
}

func (l *link) batch(kind hubwire.Kind, local store.LogState, epoch uint64) hubwire.Batch {
	return hubwire.Batch{Kind: kind, HostID: l.p.cfg.HostID, IndexID: local.IndexID, Epoch: epoch}
}

// resend publishes the whole index and returns the change it reflects.
func (l *link) resend(ctx context.Context, hub hubwire.State) (uint64, error) {
	p := l.p
	local, err := p.st.ChangeLog()
	if err != nil {
		return 0, err
	}
	epoch := randomInstance() // a random id, as an instance's
	p.setStatus(func(s *Status) {
		s.setIndex(local.IndexID.String())
		s.Resending, s.Resends = true, s.Resends+1
	})
	p.log.Info("publish: resending the index whole", "index_id", local.IndexID, "epoch", epoch)
	begin := l.batch(hubwire.SnapBegin, local, epoch)
	if err := l.publish(ctx, &begin); err != nil {
		return 0, err
	}
	chunk := l.batch(hubwire.SnapChunk, local, epoch)
	size := 0
	flush := func() error {
		size = 0
		chunk.First++
		if err := l.publish(ctx, &chunk); err != nil {
			return err
		}
		chunk.Entries = chunk.Entries[:0]
		return nil
	}
	st, err := p.st.SnapshotChanges(ctx, func(e store.Logged) error {
		chunk.Entries = append(chunk.Entries, hubwire.Entry{Path: e.Path, Backend: e.Backend, Digest: e.Digest, Size: e.Size})
		size += entryBytes(&e)
		if len(chunk.Entries) == p.cfg.Batch || size >= maxBatchBytes {
			return flush()
		}
		return nil
	})
	if err == nil && len(chunk.Entries) > 0 {
		err = flush()
	}
	if err != nil {
		return 0, err
	}
	if st.IndexID != local.IndexID {
		return 0, errors.New("publish: the index id changed during a resend")
	}
	prior := uint64(0) // the hub's resend of this index that this one replaces
	if hub.Complete && hub.IndexID == local.IndexID.String() {
		prior = hub.Epoch
	}
	l.chain = p.resent(ctx, local.IndexID, epoch, prior, st.Seq)
	end := l.batch(hubwire.SnapEnd, local, epoch)
	end.First, end.Last = chunk.First, st.Seq
	if err := l.publish(ctx, &end); err != nil {
		return 0, err
	}
	p.setStatus(func(s *Status) { s.Resending, s.Published = false, st.Seq })
	return st.Seq, nil
}

// follow publishes the log after change from until something fails.
func (l *link) follow(ctx context.Context, from uint64) error {
	p := l.p
	poll := time.NewTicker(p.cfg.Poll)
	defer poll.Stop()
	beat := time.NewTicker(p.cfg.Heartbeat)
	defer beat.Stop()
	cursor := from
	l.sent = map[uint64]hubwire.Chain{}
	for {
		if err := l.checkAck(); err != nil {
			return err
		}
		if err := l.trim(ctx); err != nil {
			return err
		}
		changes, local, err := p.st.ChangesAfter(cursor, p.cfg.Batch)
		if err != nil {
			return err // ErrTrimmed included: the next sync resends whole
		}
		p.setStatus(func(s *Status) { s.Seq, s.Published = local.Seq, cursor })
		changes = fitBatch(changes)
		if len(changes) > 0 {
			b := l.batch(hubwire.Log, local, 0)
			b.First, b.Last, b.Chain = cursor, changes[len(changes)-1].Seq, l.chain
			next := l.chain
			for i := range changes {
				b.Entries = append(b.Entries, entryOf(&changes[i]))
				next = next.Next(&b.Entries[i])
			}
			if err := l.publish(ctx, &b); err != nil {
				return err
			}
			cursor, l.chain = b.Last, next
			l.sent[cursor] = next
			p.setStatus(func(s *Status) { s.Published = cursor })
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-poll.C:
		case <-p.wake:
		case <-p.acks:
			st := l.lastAck()
			if st.Gap {
				return fmt.Errorf("publish: the hub lacks changes after %d", st.Seq)
			}
			if err := l.ahead(st); err != nil {
				return err
			}
		case <-beat.C:
			st, err := l.state(ctx)
			if err != nil {
				return err
			}
			if err := l.ahead(st); err != nil {
				return err
			}
			if err := l.check(st); err != nil {
				return err
			}
			if l.elsewhere(st, local) {
				return fmt.Errorf("publish: the hub holds another index of this host (%s), not this one's", st.IndexID)
			}
			if l.stalled(st, local, cursor) {
				return fmt.Errorf("publish: the hub lacks changes it was sent (has %d, sent %d)", st.Seq, cursor)
			}
		}
	}
}

// elsewhere reports whether the hub held another index of this host
// whole at two heartbeats in a row, with no resend of this publisher's
// under way: another machine's resend replaced this index there (a
// twin), and only a sync brings it back. Its log batches are skipped
// meanwhile, which stalled misses while the other keeps changing. One
// heartbeat may fall before the hub took up a resend just sent.
func (l *link) elsewhere(st hubwire.State, local store.LogState) bool {
	if !st.Complete || st.IndexID == local.IndexID.String() || l.p.awaiting(st) || st.Resending == l.p.anchorNow().epochs[0] {
		l.away = 0
		return false
	}
	l.away++
	return l.away >= 2
}

// fitBatch cuts changes to what one batch may carry; the rest follows in
// the next one.
func fitBatch(changes []store.Logged) []store.Logged {
	size := 0
	for i := range changes {
		if size += entryBytes(&changes[i]); size > maxBatchBytes && i > 0 {
			return changes[:i]
		}
	}
	return changes
}

// stalled reports whether the hub lacks what was sent, lacked changes
// at the last heartbeat too, and made no progress since: a batch the
// stream lost. A hub still applying what it was sent moves on between
// two heartbeats; a batch sent just before a heartbeat may not have
// reached a busy hub's view yet, and is no stall while the hub had all
// the changes at the heartbeat before.
func (l *link) stalled(st hubwire.State, local store.LogState, cursor uint64) bool {
	if st.Gap {
		return true
	}
	if l.p.awaiting(st) {
		l.beat, l.behind = "", false
		return false
	}
	caughtUp := st.Complete && st.IndexID == local.IndexID.String() && st.Seq >= cursor
	mark := fmt.Sprintf("%v/%s/%d/%d/%d", st.Complete, st.IndexID, st.Seq, st.Resending, st.Records)
	stalled := !caughtUp && l.behind && mark == l.beat
	l.beat, l.behind = mark, !caughtUp
	return stalled
}

// ahead fails when the hub holds more changes of this index than the
// index has: another machine published under this host's name and index
// id (a copy on the same boot, host name and path, which has this
// publisher's instance). The next sync resends the index whole under a
// new id.
func (l *link) ahead(st hubwire.State) error {
	local, err := l.p.st.ChangeLog()
	if err != nil {
		return err
	}
	if st.Complete && st.IndexID == local.IndexID.String() && st.Seq > local.Seq {
		return fmt.Errorf("%w: %d, this index %d", errAhead, st.Seq, local.Seq)
	}
	return nil
}

func (l *link) lastAck() hubwire.State {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	return l.p.ack
}

// trim drops from the local log what the hub's view has applied, up to
// the chain anchor kept in the index.
func (l *link) trim(ctx context.Context) error {
	s := l.p.Status()
	acked := min(s.Acked, l.p.trimLimit(s.IndexID))
	if acked <= l.trimmed {
		return nil
	}
	if err := l.p.st.TrimChanges(ctx, acked); err != nil {
		return fmt.Errorf("publish: trim the change log: %w", err)
	}
	l.trimmed = acked
	return nil
}
