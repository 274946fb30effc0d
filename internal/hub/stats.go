package hub

import (
	"maps"
	"time"
)

// Stats counts what the hub dropped and refused since it started.
type Stats struct {
	// Dropped are batches not applied, by host and reason.
	Dropped map[Refusal]int64
	// Refused are state requests and queries not answered.
	Refused map[Refusal]int64
}

// Refusal is a host and a reason. Host is empty for a name the
// configuration does not list, so the counts stay few.
type Refusal struct {
	Host, Reason string
}

// Reasons a batch is dropped.
const (
	// DropUnknownHost: a subject of a host not in the configuration.
	DropUnknownHost = "unknown_host"
	// DropNoID: a message without a message id, which a host's publisher
	// always sets; a reply some host aimed at the subject.
	DropNoID = "no_msg_id"
	// DropUndecodable: not a batch, or beyond the decoder's bounds.
	DropUndecodable = "undecodable"
	// DropUnappliable: the view could not apply it.
	DropUnappliable = "unappliable"
	// DropBadClaim: a message on a host's claims subject that the hub did
	// not write (claim.go): a reply or a delivery some host aimed there.
	DropBadClaim = "bad_claim"
	// DropForeign: a log batch whose chain does not lead to the hub's
	// (hubwire's chain.go): another history of the host's index.
	DropForeign = "foreign_history"
)

// NoteForeign is why the view skips a batch of DropForeign.
const NoteForeign = "another history of the index"

// Reasons a request is refused.
const (
	// RefuseUnknownHost: a subject of a host not in the configuration.
	RefuseUnknownHost = "unknown_host"
	// RefuseReplyElsewhere: the reply subject is not in the asking
	// host's own inbox, or there is none.
	RefuseReplyElsewhere = "reply_elsewhere"
)

// warnEvery spaces the warnings of one host and reason: a host that
// sends garbage as fast as it can does not flood the log.
const warnEvery = time.Minute

// counted is what a count is of: a batch dropped or a request refused.
type counted struct {
	refused bool
	Refusal
}

// warning is when a count was last warned of, and its value then.
type warning struct {
	at time.Time
	n  int64
}

// countDrop counts a batch of host name dropped for reason why. It
// returns how many were dropped since the last warning of that host and
// reason when one is due now, else 0.
func (h *Hub) countDrop(name, why string) int64 { return h.count(false, name, why) }

// countRefusal counts a request refused, as countDrop counts batches.
func (h *Hub) countRefusal(name, why string) int64 { return h.count(true, name, why) }

func (h *Hub) count(refused bool, name, why string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.known[name] {
		name = ""
	}
	m := h.stats.Dropped
	if refused {
		m = h.stats.Refused
	}
	r := Refusal{Host: name, Reason: why}
	m[r]++
	k, now := counted{refused, r}, h.cfg.Now()
	last, ok := h.warned[k]
	if ok && now.Sub(last.at) < warnEvery {
		return 0
	}
	h.warned[k] = warning{at: now, n: m[r]}
	return m[r] - last.n
}

// Stats returns a copy of the counts, for metrics.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Stats{Dropped: maps.Clone(h.stats.Dropped), Refused: maps.Clone(h.stats.Refused)}
}
