package hub

import "maps"

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
)

// Reasons a request is refused.
const (
	// RefuseUnknownHost: a subject of a host not in the configuration.
	RefuseUnknownHost = "unknown_host"
	// RefuseReplyElsewhere: the reply subject is not in the asking
	// host's own inbox, or there is none.
	RefuseReplyElsewhere = "reply_elsewhere"
)

// count adds one to m for host name and reason why.
func (h *Hub) count(m map[Refusal]int64, name, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.known[name] {
		name = ""
	}
	m[Refusal{Host: name, Reason: why}]++
}

// Stats returns a copy of the counts, for metrics.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Stats{Dropped: maps.Clone(h.stats.Dropped), Refused: maps.Clone(h.stats.Refused)}
}
