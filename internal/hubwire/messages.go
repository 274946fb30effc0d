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
	// Gap: a log batch came after changes the hub lacks (a stream that
	// lost messages); the host resends from Seq.
	Gap bool `json:"gap,omitempty"`
	// Resending: a whole resend is under way (its epoch), not complete.
	Resending uint64    `json:"resending,omitempty"`
	LastSeen  time.Time `json:"last_seen"`
	Records   int64     `json:"records"`
	Bytes     int64     `json:"bytes"`
	Stale     bool      `json:"stale"` // not heard from for longer than the hub's stale time
}

// Holder is one host's copies of some content.
type Holder struct {
	Host     string    `json:"host"`
	Stale    bool      `json:"stale"`
	LastSeen time.Time `json:"last_seen"`
	Paths    [][]byte  `json:"paths"` // raw bytes, base64 in JSON; at most MaxPaths
	Count    int64     `json:"count"` // the host's paths with this content; Paths lists MaxPaths at most
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
