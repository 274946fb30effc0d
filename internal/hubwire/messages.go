package hubwire

import "time"

// State is what the hub has applied of one host, and how it last heard of
// it. It answers a request on StatePrefix+name and is sent on
// AckPrefix+name after each applied batch. Name is the host it is for: a
// host takes no state that names another.
type State struct {
	Name     string `json:"name"`
	HostID   string `json:"host_id,omitempty"`  // the UUID the host last sent
	IndexID  string `json:"index_id,omitempty"` // hex; empty before the first whole resend
	Epoch    uint64 `json:"epoch,omitempty"`
	Seq      uint64 `json:"seq"`      // the host's changes applied, through this one
	Complete bool   `json:"complete"` // a whole resend of IndexID is in
	// Chain is the hub's chain of IndexID through Seq (chain.go); none
	// when it keeps none (an older hub, or a host not resent since).
	Chain Chain `json:"chain,omitzero"`
	// Gap: a log batch came after changes the hub lacks (a stream that
	// lost messages); the host resends from Seq.
	Gap bool `json:"gap,omitempty"`
	// Resending: a whole resend is under way (its epoch), not complete.
	Resending uint64    `json:"resending,omitempty"`
	LastSeen  time.Time `json:"last_seen"`
	Records   int64     `json:"records"`
	Bytes     int64     `json:"bytes"`
	Stale     bool      `json:"stale"` // not heard from for longer than the hub's stale time
	// Instance is the publisher the hub takes this host's changes from
	// (StateRequest.Instance); 0 before one asked with an instance.
	Instance uint64 `json:"instance,omitempty"`
	// Previous, in the answer to the state request whose publisher took
	// the host's name over, is the publisher that held it before: what
	// the hub has of the host came from it.
	Previous uint64 `json:"previous,omitempty"`
	// Rival is when another publisher last asked under this host's name
	// while Instance held it (a cloned machine, a copied configuration);
	// zero when none did lately.
	Rival time.Time `json:"rival,omitzero"`
}

// StateRequest is the body of a state request: which publisher asks.
// Instance is random, kept by the host's index through restarts within a
// boot, and new after a reboot: a copy of the machine that boots on its
// own gets one of its own (publish.Instances). An empty body is a
// publisher from before instances, whose requests always hold.
type StateRequest struct {
	Instance uint64 `json:"instance,omitempty"`
}

// ClaimLease is how long a publisher holds its host's name at the hub
// after its last word in the hub's stream (hub's claim.go); MaxHeartbeat
// is the longest a publisher stays silent, well inside it.
const (
	ClaimLease   = 3 * time.Minute
	MaxHeartbeat = time.Minute
)

// InstanceHeader carries, on each batch, the instance of the publisher
// that sent it (hex).
const InstanceHeader = "Annexd-Instance"

// Holder is one host's copies of some content.
type Holder struct {
	Host     string    `json:"host"`
	Stale    bool      `json:"stale"`
	LastSeen time.Time `json:"last_seen"`
	Paths    [][]byte  `json:"paths"` // raw bytes, base64 in JSON; at most MaxPaths
	Count    int64     `json:"count"` // the host's paths with this content; Paths lists MaxPaths at most
	// Unconfirmed counts, of Count, the paths recorded before a whole
	// resend of the host that is under way, which has not sent them
	// again yet: some may be gone. A holder counts as a copy only with
	// a path confirmed.
	Unconfirmed int64 `json:"unconfirmed,omitempty"`
}

// MaxPaths is the most paths a Holder lists, so a reply stays well below
// NATS's message limit even for content as common as the empty file.
const MaxPaths = 100

// Content is one digest of one size, as a git-annex key names it, and who
// holds it. Claims of the same digest with another size are another content.
type Content struct {
	Backend string   `json:"backend"` // base backend name, e.g. SHA256
	Digest  string   `json:"digest"`  // hex
	Size    int64    `json:"size"`
	Holders []Holder `json:"holders"`
}

// WhereisRequest asks who holds one content: a digest of a size. Without
// a size the hub picks one: the size the asker holds, else the one most
// hosts hold.
type WhereisRequest struct {
	Backend string `json:"backend"`
	Digest  string `json:"digest"`
	Size    *int64 `json:"size,omitempty"`
}

// WhereisReply lists the holders, fresh ones first.
type WhereisReply struct {
	Content
	Error string `json:"error,omitempty"`
}

// DupsRequest asks for content held by two hosts or more, largest first,
// resuming after the cursor After.
type DupsRequest struct {
	MinSize int64  `json:"min_size,omitempty"`
	After   []byte `json:"after,omitempty"`
	Limit   int    `json:"limit,omitempty"`
}

// CopiesRequest asks for content held by fewer than FewerThan fresh
// hosts: of Host's files under Prefix when Host is set, else of all.
type CopiesRequest struct {
	FewerThan int    `json:"fewer_than"`
	Host      string `json:"host,omitempty"`
	Prefix    []byte `json:"prefix,omitempty"`
	After     []byte `json:"after,omitempty"`
	Limit     int    `json:"limit,omitempty"`
}

// ListReply is a page of contents; Next resumes it (nil: the end).
type ListReply struct {
	Items []Content `json:"items"`
	Next  []byte    `json:"next,omitempty"`
	Error string    `json:"error,omitempty"`
}

// HostsReply lists every host the hub knows.
type HostsReply struct {
	Hosts []State `json:"hosts"`
	Error string  `json:"error,omitempty"`
}
