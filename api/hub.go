package api

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/annexd/annexd/key"
)

// Hubber asks a hub which hosts hold what (GET /v1/hub/...). A server
// without one answers 404 with CodeNoHub. Its methods fail with
// ErrHubUnreachable when the hub does not answer.
type Hubber interface {
	// HubWhereis lists the hosts holding q's content, fresh ones first.
	HubWhereis(ctx context.Context, q HubWhereisQuery) (HubContent, error)
	// HubDups returns a page of content held by two hosts or more,
	// largest first.
	HubDups(ctx context.Context, q HubDupsQuery) (HubPage, error)
	// HubCopies returns a page of content held by fewer than
	// q.FewerThan hosts that are not stale.
	HubCopies(ctx context.Context, q HubCopiesQuery) (HubPage, error)
	// HubHosts lists the hosts the hub knows.
	HubHosts(ctx context.Context) ([]HubHost, error)
}

// Errors of the hub queries.
var (
	// ErrNoHub: the daemon neither runs a hub nor publishes to one (404).
	ErrNoHub = errors.New("api: this daemon has no hub link")
	// ErrHubUnreachable: the daemon could not reach its hub (503).
	ErrHubUnreachable = errors.New("api: the hub is not reachable")
)

// Error codes of the hub queries.
const (
	CodeNoHub          = "no_hub"
	CodeHubUnreachable = "hub_unreachable"
)

// HubDupsQuery selects content held by two hosts or more.
type HubDupsQuery struct {
	MinSize int64  // only content of at least this many bytes
	After   []byte // resume after this cursor (HubPage.Next); nil from the start
	Limit   int    // at most this many items; 0 means the hub's page size
}

// HubWhereisQuery asks which hosts hold one content.
type HubWhereisQuery struct {
	WhereisQuery
	// Size is the content's size, from its key or file: the same digest
	// claimed with another size is other content. -1: not known; the hub
	// answers for the size this host holds, else the one most hosts hold.
	Size int64
}

// HubCopiesQuery selects content held by too few hosts.
type HubCopiesQuery struct {
	FewerThan int // held by fewer than this many fresh hosts; at least 1
	// Path limits the answer to this host's files at or below it. It is
	// absolute and clean, under the roots as the index stores them; nil
	// means all of this host's files.
	Path []byte
	// AllHosts asks about every content the hub knows, whoever holds it;
	// Path must then be nil.
	AllHosts bool
	After    []byte // resume after this cursor; nil from the start
	Limit    int    // at most this many items; 0 means the hub's page size
}

// HubPage is one page of a hub query; Next resumes it (nil: the end).
type HubPage struct {
	Items []HubContent
	Next  []byte
}

// HubContent is one content and the hosts that hold it.
type HubContent struct {
	Backend key.Backend // base backend, e.g. SHA256
	Digest  []byte
	Size    int64
	Holders []HubHolder // fresh hosts first, then by name
}

// Key is the content's key without an extension: backend, size, digest.
func (c HubContent) Key() string {
	return fmt.Sprintf("%s-s%d--%s", c.Backend.Base(), c.Size, hex.EncodeToString(c.Digest))
}

// Fresh counts the holders that count as copies: not stale, with a
// path that no resend under way leaves unconfirmed.
func (c HubContent) Fresh() int {
	n := 0
	for _, h := range c.Holders {
		if !h.Stale && h.Count > h.Unconfirmed {
			n++
		}
	}
	return n
}

// HubHolder is one host's copies of a content.
type HubHolder struct {
	Host     string
	Stale    bool      // not heard from for longer than the hub's stale time
	LastSeen time.Time // when the hub last heard from the host
	Paths    [][]byte  // at most 100 of them
	Count    int64     // the host's paths with this content, listed or not
	// Unconfirmed counts, of Count, the paths recorded before a whole
	// resend of the host that is under way, not sent again yet: some may
	// be gone.
	Unconfirmed int64
}

// HubHost is what the hub knows of one host.
type HubHost struct {
	Name      string    `json:"name"`
	HostID    string    `json:"host_id,omitempty"`
	IndexID   string    `json:"index_id,omitempty"` // empty until a whole index arrived
	Seq       uint64    `json:"seq"`                // the host's changes applied, through this one
	Complete  bool      `json:"complete"`           // a whole index is in
	Resending bool      `json:"resending"`          // a whole resend is under way
	LastSeen  time.Time `json:"last_seen"`
	Records   int64     `json:"records"`
	Bytes     int64     `json:"bytes"`
	Stale     bool      `json:"stale"`
}

// HubStatus is the daemon's link to its hub (Status.Hub).
type HubStatus struct {
	Name    string `json:"name"`             // this host's name at the hub
	URL     string `json:"url,omitempty"`    // the hub's address; empty on the hub's own machine
	Serving bool   `json:"serving"`          // this daemon runs the hub
	Listen  string `json:"listen,omitempty"` // where the hub listens, when Serving
	Hosts   int    `json:"hosts,omitempty"`  // hosts the hub knows, when Serving
	Stale   int    `json:"stale,omitempty"`  // of them, stale ones
	// Problem says why the publisher stopped; empty while it runs.
	Problem string `json:"problem,omitempty"`

	Connected bool      `json:"connected"`
	IndexID   string    `json:"index_id"`
	Seq       uint64    `json:"seq"`       // the index's last change
	Published uint64    `json:"published"` // the last change the hub's stream took
	Acked     uint64    `json:"acked"`     // the last change the hub applied
	Lag       uint64    `json:"lag"`       // changes the hub has not applied yet
	Resending bool      `json:"resending"` // a whole resend is under way
	Resends   int64     `json:"resends"`   // whole resends begun since start
	LastAck   time.Time `json:"last_ack,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	// Rival says that another machine published, or asked to, under this
	// host's name lately: a copy of this machine or of its configuration.
	Rival string `json:"rival,omitempty"`
}

type hubContentWire struct {
	Backend string          `json:"backend"`
	Digest  string          `json:"digest"`
	Size    int64           `json:"size"`
	Key     string          `json:"key"`
	Holders []hubHolderWire `json:"holders"`
}

type hubHolderWire struct {
	Host     string     `json:"host"`
	Stale    bool       `json:"stale"`
	LastSeen time.Time  `json:"last_seen"`
	Count    int64      `json:"count"`
	Paths    []wirePath `json:"paths"`
	// Unconfirmed: see HubHolder.
	Unconfirmed int64 `json:"unconfirmed,omitempty"`
}

// MarshalJSON implements json.Marshaler.
func (c HubContent) MarshalJSON() ([]byte, error) {
	w := hubContentWire{Backend: c.Backend.String(), Digest: hex.EncodeToString(c.Digest), Size: c.Size, Key: c.Key(),
		Holders: make([]hubHolderWire, len(c.Holders))}
	for i, h := range c.Holders {
		hw := hubHolderWire{Host: h.Host, Stale: h.Stale, LastSeen: h.LastSeen, Count: h.Count, Paths: make([]wirePath, len(h.Paths)),
			Unconfirmed: h.Unconfirmed}
		for j, p := range h.Paths {
			hw.Paths[j] = p
		}
		w.Holders[i] = hw
	}
	return json.Marshal(w)
}

// UnmarshalJSON implements json.Unmarshaler.
func (c *HubContent) UnmarshalJSON(b []byte) error {
	var w hubContentWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	bk, err := key.ParseBackend(w.Backend)
	if err != nil {
		return err
	}
	d, err := hex.DecodeString(w.Digest)
	if err != nil || len(d) != bk.DigestLen() {
		return fmt.Errorf("%w: digest %q", ErrBadResponse, w.Digest)
	}
	*c = HubContent{Backend: bk, Digest: d, Size: w.Size, Holders: make([]HubHolder, len(w.Holders))}
	for i, hw := range w.Holders {
		h := HubHolder{Host: hw.Host, Stale: hw.Stale, LastSeen: hw.LastSeen, Count: hw.Count, Paths: make([][]byte, len(hw.Paths)),
			Unconfirmed: hw.Unconfirmed}
		for j, p := range hw.Paths {
			h.Paths[j] = p
		}
		c.Holders[i] = h
	}
	return nil
}

// HubHosts is the answer of GET /v1/hub/hosts.
type HubHosts struct {
	Hosts []HubHost `json:"hosts"`
}
