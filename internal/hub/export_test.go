package hub

import (
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/annexd/annexd/internal/hubwire"
)

// Whereis answers from this node's own view, whichever node a query
// would reach.
func (h *Hub) Whereis(backend, digest string) (hubwire.Content, error) {
	h.mu.Lock()
	v := h.view
	h.mu.Unlock()
	return v.whereis("", hubwire.WhereisRequest{Backend: backend, Digest: digest})
}

// StreamLeader reports whether this node leads the stream's replicas.
func (h *Hub) StreamLeader() bool {
	h.mu.Lock()
	srv := h.srv
	h.mu.Unlock()
	return srv != nil && srv.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, hubwire.Stream)
}

// InternalOptions are the options of the hub's own connection, for tests
// of what its permissions allow. Valid once Ready.
func (h *Hub) InternalOptions() []nats.Option {
	h.mu.Lock()
	defer h.mu.Unlock()
	return []nats.Option{nats.InProcessServer(h.srv), nats.UserInfo(internalUser, h.internalPass),
		nats.CustomInboxPrefix(internalInbox)}
}

// SetClaimLease shortens how long a publisher holds its host's name, so
// that tests see it lapse in real time: the lease runs on the stream's
// clock, which no test clock moves.
func SetClaimLease(c *Config, d time.Duration) { c.claimLease = d }
