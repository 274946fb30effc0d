// Package hub runs the embedded NATS JetStream server that every host
// publishes its changes to, and answers from them which hosts hold what.
//
// # Flow
//
// Each host publishes batches of its change log on its own subject
// (package hubwire). The stream ANNEXD_CHANGES keeps them on disk until
// the hub has applied them: work-queue retention, a byte bound with new
// batches refused when full, and a ten-minute duplicate window over the
// batches' message ids. One durable consumer with one batch in flight
// applies them in order to the view, a bbolt file of the hub's own, and
// acks each after its transaction committed. The view records, per host,
// the index id and the last change applied, in the same transaction as
// the records: that is what "acknowledged" means to a host, which trims
// its log only up to it. A repeated or overlapping batch is skipped by
// sequence, a batch after a gap is refused and the host resends from
// the last change applied, so the view is exact whatever the stream
// delivers twice or loses.
//
// A whole resend (a new index, or one the hub cannot follow) is applied
// beside the host's old records, each record tagged with the resend; its
// end removes the records it did not refresh. Until then, queries answer
// from the old records.
//
// # The view
//
// Buckets: hosts (name → state), files (host number ‖ path → digest,
// size, resend tag), bydigest (backend ‖ digest ‖ host number ‖ path),
// digests (backend ‖ digest → size, paths, hosts) and xdups (digests on
// two hosts or more, largest first). Whereis is one prefix scan of
// bydigest; dups walks xdups; copies walks one host's paths, or every
// digest, and counts the fresh holders of each.
//
// A bbolt file rather than a JetStream key-value bucket: whereis needs
// the digest index, which a KV bucket cannot keep atomically with the
// records, and JetStream keeps every subject of a stream in memory (see
// BENCHMARKS.md for the figures).
//
// # Trust
//
// A hub without host credentials refuses to start. Each host has its own
// user (a bcrypt password hash or an nkey) whose permissions allow its own
// subject, its state requests and queries, and its own reply inbox; the
// name in the subject, not anything a batch says, decides whose records a
// batch changes. A listener on a non-loopback address needs TLS unless
// plaintext is allowed explicitly. The hub machine's own annexd and the
// hub's consumer connect in process with credentials made at start,
// which the network listener refuses.
//
// A host not heard from (no batch, no state request) for Config.StaleAfter
// is stale: queries mark its copies so, and copies does not count them.
//
// # Cluster
//
// With Config.Cluster, the hub is one node of several joined by NATS
// routes, which authenticate with a shared secret and need TLS beyond
// loopback. The stream keeps each batch on up to three nodes and until
// every node's consumer has acked it (interest retention, not a work
// queue). Each node makes every node's consumer at start, feeds its own
// view from its own, and answers once that view has applied what the
// stream held for it. So a node back from a stop catches up before it
// answers, and any node answers for all. Every node hears a host's state
// requests; one answers each query. A host dials every node's URL and
// fails over between them. A host takes an ack from any node, because
// the stream keeps the batch for the others; a node that stays down
// holds batches back until the stream is full, and hosts then keep their
// changes until it returns.
package hub
