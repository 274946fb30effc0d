package hub

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/internal/durable"
	"github.com/annexd/annexd/internal/hubwire"
)

// # One publisher a host
//
// Credentials name a host, not a machine: a cloned virtual machine, or a
// configuration copied to a second machine, publishes under the same
// name, index id and sequence numbers as the host, with other changes.
// Applied both, the view would hold a mix of two indexes that neither
// has, and each would trim its log on the other's acks. So each publisher
// names itself with an instance (hubwire.StateRequest), and the view
// takes a host's changes from one instance at a time: the one that holds
// the name. A publisher without an instance (an older version) is not
// checked.
//
// The stream decides who holds a name, so that every node of a cluster
// decides alike. For each state request with an instance, the hub writes
// a claim into the stream (ClaimPrefix, a subject hosts cannot publish
// on); every node that hears the request writes the same one, under one
// message id, so the stream keeps it once. Each view judges the claims
// in stream order, by the stream's own timestamps, not by its clock:
//
//   - the holder's claim, and each of its batches, renews its lease;
//   - another instance's claim takes the name over once the holder's
//     last word in the stream is older than the lease (stopped, or gone
//     with its machine), or when no instance holds it;
//   - any other claim, and every batch from an instance that does not
//     hold the name at that point of the stream, is refused: counted
//     under RefuseRival and DropRival.
//
// The holder's requests are answered at once from the view; its claims
// only renew the lease, one per lease/8 at most from each node. Another
// instance's request is answered once this node's view judged its claim
// (claimWait at most): the answer to the request that takes the name
// over names the instance it took it from (State.Previous), so the new
// holder can tell whether what the hub has is its own history (publish
// resends its index whole when not). Both publishers hear of the other
// (State.Rival).

// defaultClaimLease is how long an instance holds its host's name after
// its last word in the stream. A publisher asks for its state at least
// every hubwire.MaxHeartbeat.
const defaultClaimLease = hubwire.ClaimLease

// claimWait bounds how long a node waits for its view to judge a claim
// before it answers with what the view has.
const claimWait = 4 * time.Second

// Reasons for the rival's batches and requests.
const (
	// DropRival: a batch from another publisher than the one that holds
	// the host's name.
	DropRival = "rival_publisher"
	// RefuseRival: a state request from another publisher than the one
	// that holds the host's name; it is answered, as a refusal.
	RefuseRival = "rival_publisher"
)

// claims is what a view keeps in memory of the claims it judges.
type claims struct {
	// took is the takeover of each host not yet told to its new holder:
	// the instance that took the name, the one it took it from, and the
	// claim that took it, whose answer alone tells it.
	took map[string]takeover
	// judged is when each claim lately judged was (by message id), and
	// waits the answers that wait for a claim not yet judged.
	judged map[string]time.Time
	waits  map[string]chan struct{}
	// asking is the hosts whose claim from another instance this node
	// waits for, asked when it last wrote one; renewed is when it last
	// wrote each holder's claim.
	asking  map[string]bool
	asked   map[string]time.Time
	renewed map[string]time.Time
}

// takeover is a claim that took a host's name.
type takeover struct {
	inst, prev uint64
	id         string
}

func newClaims() claims {
	return claims{took: map[string]takeover{}, judged: map[string]time.Time{}, waits: map[string]chan struct{}{},
		asking: map[string]bool{}, asked: map[string]time.Time{}, renewed: map[string]time.Time{}}
}

// askEvery is the least time between two claims of other instances that
// one node writes for a host: what a host flooding requests gets into
// the stream.
const askEvery = time.Second

// judge applies the claim id of publisher inst to host name's name, made
// at stream time at, and reports whether it holds the name after it. A
// refused claim writes nothing, unless it starts the lease of a holder
// from before claims in the stream.
func (v *view) judge(name string, inst uint64, at time.Time, id string) (bool, error) {
	v.mu.Lock()
	var holder uint64
	var stamp time.Time
	if h, ok := v.hosts[name]; ok {
		holder, stamp = h.Instance, h.Stamp
	}
	v.mu.Unlock()
	took := holder != inst && (holder == 0 || !stamp.IsZero() && at.Sub(stamp) > v.lease)
	holds := holder == inst || took
	if holds || stamp.IsZero() {
		err := v.update(func(_ *bolt.Tx, get func(string) (*hostRec, error)) error {
			h, err := get(name)
			if err == nil {
				h.Stamp = at
				if took {
					h.Instance = inst
				}
			}
			return err
		})
		if err != nil {
			return false, err
		}
	}
	v.mu.Lock()
	switch {
	case took:
		v.claims.took[name] = takeover{inst: inst, prev: holder, id: id}
		delete(v.rivals, name) // what spoke as a rival until now holds the name
	case !holds:
		v.rivals[name] = v.now()
	}
	v.judgedLocked(id)
	v.mu.Unlock()
	if took && holder != 0 {
		v.log.Warn("hub: another publisher took over this host's name: the one that held it had not been heard for "+
			v.lease.String(), "host", name, "from", strconv.FormatUint(holder, 16), "to", strconv.FormatUint(inst, 16))
	}
	return holds, nil
}

// restarted starts every holder's lease again at stream time at, when a
// hub node started: no publisher could speak while the hub was away, so
// the hub's own downtime does not count as a holder's silence.
func (v *view) restarted(at time.Time) error {
	return v.update(func(_ *bolt.Tx, get func(string) (*hostRec, error)) error {
		v.mu.Lock()
		var held []string
		for name, h := range v.hosts {
			if h.Instance != 0 && at.After(h.Stamp) {
				held = append(held, name)
			}
		}
		v.mu.Unlock()
		for _, name := range held {
			h, err := get(name)
			if err != nil {
				return err
			}
			h.Stamp = at
		}
		return nil
	})
}

// writeRestart writes into the stream that this node started (restarted),
// before it answers any request.
func (h *Hub) writeRestart(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	name := "hub"
	id := "restart " + rand.Text()
	body, _ := json.Marshal(claimMsg{MAC: h.claimMAC(name, id, 0)})
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = js.PublishMsg(ctx, &nats.Msg{Subject: hubwire.ClaimPrefix + name, Data: body},
		jetstream.WithMsgID(id), jetstream.WithExpectStream(hubwire.Stream))
	if err != nil {
		return fmt.Errorf("hub: note the start in the stream: %w", err)
	}
	return nil
}

// judgedLocked notes claim id as judged and wakes what waits for it;
// claims judged more than a minute ago are forgotten.
func (v *view) judgedLocked(id string) {
	now := time.Now()
	for k, t := range v.claims.judged {
		if now.Sub(t) > time.Minute {
			delete(v.claims.judged, k)
		}
	}
	v.claims.judged[id] = now
	if ch, ok := v.claims.waits[id]; ok {
		close(ch)
		delete(v.claims.waits, id)
	}
}

// await returns a channel closed once claim id is judged.
func (v *view) await(id string) chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	ch := make(chan struct{})
	if _, ok := v.claims.judged[id]; ok {
		close(ch)
		return ch
	}
	v.claims.waits[id] = ch
	return ch
}

// forget drops the wait for claim id.
func (v *view) forget(id string) {
	v.mu.Lock()
	delete(v.claims.waits, id)
	v.mu.Unlock()
}

// holder is the instance that holds host name's name; 0 for none.
func (v *view) holder(name string) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if h, ok := v.hosts[name]; ok {
		return h.Instance
	}
	return 0
}

// answer is the state to answer publisher inst of host name with, asked
// by the request whose claim is id (empty: none). State.Previous, the
// instance inst took the name from, is told only in the answer to the
// claim that took it: a node that replays a takeover, or judged it late,
// does not tell it again.
func (v *view) answer(name string, inst uint64, id string) hubwire.State {
	st := v.state(name)
	if st.Instance != inst {
		return st
	}
	v.heard(name)
	v.mu.Lock()
	if t, ok := v.claims.took[name]; ok && id != "" && t.id == id && t.inst == inst {
		st.Previous = t.prev
		delete(v.claims.took, name)
	}
	v.mu.Unlock()
	return st
}

// renewDue reports whether this node writes the holder's claim now: no
// more than once per lease/8, unless the last write failed.
func (v *view) renewDue(name string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if time.Since(v.claims.renewed[name]) < v.lease/8 {
		return false
	}
	v.claims.renewed[name] = time.Now()
	return true
}

// renewFailed lets the holder's next request write its claim again.
func (v *view) renewFailed(name string) {
	v.mu.Lock()
	delete(v.claims.renewed, name)
	v.mu.Unlock()
}

// ask marks a claim from another instance of host name as waited for by
// this node, and reports false when one is already, or one was written
// less than askEvery ago: that request is answered with what the view
// has.
func (v *view) ask(name string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.claims.asking[name] || time.Since(v.claims.asked[name]) < askEvery {
		return false
	}
	v.claims.asking[name], v.claims.asked[name] = true, time.Now()
	return true
}

// answered ends the wait ask began.
func (v *view) answered(name string) {
	v.mu.Lock()
	delete(v.claims.asking, name)
	v.mu.Unlock()
}

// fromHolder reports whether a batch from publisher inst of host name is
// the holder's at this point of the stream: it is, or no instance is
// known on either side.
func (v *view) fromHolder(name string, inst uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	h, ok := v.hosts[name]
	if inst == 0 || !ok || h.Instance == 0 || h.Instance == inst {
		return true
	}
	v.rivals[name] = v.now()
	return false
}

// noteRival notes that another publisher than the holder spoke as name.
func (v *view) noteRival(name string) {
	v.mu.Lock()
	v.rivals[name] = v.now()
	v.mu.Unlock()
}

// instanceOf parses the instance of a batch's header; 0 when absent.
func instanceOf(hex string) uint64 {
	n, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		return 0
	}
	return n
}

// onState answers a state request m of host name. The holder's is
// answered at once and renews its lease; another instance's once its
// claim was judged.
func (h *Hub) onState(nc *nats.Conn, js jetstream.JetStream, v *view, name string, m *nats.Msg) {
	var req hubwire.StateRequest
	_ = json.Unmarshal(m.Data, &req) // an empty body: a publisher without an instance
	inst := req.Instance
	switch {
	case inst == 0:
		v.heard(name)
		h.respond(nc, m, v.state(name))
		return
	case v.holder(name) == inst:
		if v.renewDue(name) {
			h.goClaim(func(ctx context.Context) {
				if err := h.writeClaim(ctx, js, name, inst, m.Reply); err != nil {
					v.renewFailed(name)
				}
			})
		}
		h.respond(nc, m, v.answer(name, inst, ""))
		return
	case !v.ask(name):
		h.refuse(nc, v, name, inst, "", m)
		return
	}
	h.goClaim(func(ctx context.Context) {
		defer v.answered(name)
		id := h.claimID(name, m.Reply)
		done := v.await(id)
		defer v.forget(id)
		if err := h.writeClaim(ctx, js, name, inst, m.Reply); err != nil {
			h.cfg.Logger.Warn("hub: write a claim into the stream", "host", name, "err", err)
		} else {
			t := time.NewTimer(claimWait)
			select {
			case <-done:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		h.refuse(nc, v, name, inst, id, m)
	})
}

// refuse answers publisher inst of host name, whose request made claim
// id, with the view's state, counted as a refusal when another instance
// holds the name.
func (h *Hub) refuse(nc *nats.Conn, v *view, name string, inst uint64, id string, m *nats.Msg) {
	st := v.answer(name, inst, id)
	if st.Instance != 0 && st.Instance != inst {
		v.noteRival(name)
		if n := h.countRefusal(name, RefuseRival); n > 0 {
			h.cfg.Logger.Warn("hub: another publisher asks under this host's name while the one that holds it "+
				"is heard; its changes are refused (a cloned machine, or a configuration copied to a second one?)",
				"host", name, "holder", fmt.Sprintf("%x", st.Instance), "other", fmt.Sprintf("%x", inst), "refused", n)
		}
	}
	h.respond(nc, m, st)
}

// goClaim runs fn beside the subscription, which it must not hold up;
// Run waits for it. Once Run ends, fn is not run.
func (h *Hub) goClaim(fn func(ctx context.Context)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ctx := h.claimCtx
	if ctx == nil || ctx.Err() != nil {
		return
	}
	h.claiming.Add(1)
	go func() {
		defer h.claiming.Done()
		fn(ctx)
	}()
}

// endClaims stops the claims under way and waits for them.
func (h *Hub) endClaims(stop context.CancelFunc) {
	h.mu.Lock()
	stop()
	h.mu.Unlock()
	h.claiming.Wait()
}

// A claim in the stream is the hub's: its message id and body carry MACs
// under the hub's claim key (Config.claimKey), which no host has. The
// stream takes whatever reaches its subjects, and a host can aim the
// server's own messages (a publish's ack, a consumer's deliveries) at a
// subject it may not publish on.

// claimMsg is a claim's body.
type claimMsg struct {
	Instance uint64 `json:"instance"`
	MAC      string `json:"mac"`
}

// claimID is the message id of the claim a state request of host name
// makes: a MAC of its reply subject, the same for every node that heard
// it, and unique to it.
func (h *Hub) claimID(name, reply string) string {
	return "claim " + h.mac(name, "\x00", reply)
}

// claimMAC is the MAC a claim of inst to host name's name under message
// id carries.
func (h *Hub) claimMAC(name, id string, inst uint64) string {
	return h.mac(name, "\x00", id, "\x00", strconv.FormatUint(inst, 16))
}

func (h *Hub) mac(parts ...string) string {
	m := hmac.New(sha256.New, h.claimKey)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// writeClaim writes the claim of publisher inst to host name's name into
// the stream, as asked by the request whose reply subject is reply.
func (h *Hub) writeClaim(ctx context.Context, js jetstream.JetStream, name string, inst uint64, reply string) error {
	id := h.claimID(name, reply)
	body, _ := json.Marshal(claimMsg{Instance: inst, MAC: h.claimMAC(name, id, inst)})
	ctx, cancel := context.WithTimeout(ctx, claimWait)
	defer cancel()
	_, err := js.PublishMsg(ctx, &nats.Msg{Subject: hubwire.ClaimPrefix + name, Data: body},
		jetstream.WithMsgID(id), jetstream.WithExpectStream(hubwire.Stream))
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == errCodeDuplicateInProcess {
		return nil // another node's write of the same claim
	}
	return err
}

// errCodeDuplicateInProcess is the server's JSStreamDuplicateMessageConflict:
// a message under the same id is being stored.
const errCodeDuplicateInProcess jetstream.ErrorCode = 10158

// handleClaim judges a claim the stream delivered; one that is not the
// hub's is dropped.
func (h *Hub) handleClaim(v *view, name string, m jetstream.Msg) {
	var c claimMsg
	id := m.Headers().Get(jetstream.MsgIDHeader)
	md, err := m.Metadata()
	if err == nil && (json.Unmarshal(m.Data(), &c) != nil ||
		!hmac.Equal([]byte(c.MAC), []byte(h.claimMAC(name, id, c.Instance)))) {
		err = errors.New("not a claim the hub wrote")
	}
	if err != nil {
		h.drop(name, DropBadClaim, err)
		_ = m.Term()
		return
	}
	if c.Instance == 0 {
		err = v.restarted(md.Timestamp)
	} else {
		_, err = v.judge(name, c.Instance, md.Timestamp, id)
	}
	if err != nil {
		h.drop(name, DropUnappliable, err)
		_ = m.Term()
		return
	}
	if err := m.Ack(); err != nil {
		h.cfg.Logger.Warn("hub: ack", "host", name, "err", err)
	}
}

// claimKey is the key of the hub's claims: on a cluster, derived from the
// routes' secret, which every node has alike (checkCluster refuses a
// bcrypt hash, which would let nodes with different keys form a
// cluster); on a single hub, random and kept in Dir/claim.key, so that
// claims written before a restart still count.
func (c *Config) claimKey() ([]byte, error) {
	if c.Cluster != nil {
		k := sha256.Sum256([]byte("annexd hub claims\x00" + c.Cluster.Secret))
		return k[:], nil
	}
	path := filepath.Join(c.Dir, "claim.key")
	k, err := os.ReadFile(path)
	switch {
	case err == nil && len(k) == 32:
		return k, nil
	case err == nil:
		return nil, fmt.Errorf("hub: %s holds %d bytes, not a key of 32: remove it, and the hub makes a new one "+
			"(claims waiting in its stream are then dropped, and their hosts ask again)", path, len(k))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("hub: read the claim key: %w", err)
	}
	k = make([]byte, 32)
	_, _ = rand.Read(k)
	switch err := durable.CreateFile(path, k); {
	case errors.Is(err, fs.ErrExist):
		return c.claimKey() // another process made it first
	case err != nil:
		return nil, fmt.Errorf("hub: keep the claim key: %w", err)
	}
	return k, nil
}
