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
// from the old records too, counted as unconfirmed (hubwire.Holder), and
// a holder with none confirmed is no copy.
//
// # The view
//
// Records are grouped by content: base backend ‖ digest ‖ size, what a
// git-annex key names. Buckets: hosts (name → state), files (host number
// ‖ path → digest, size, resend tag), bydigest (content ‖ host number ‖
// path), digests (content → size, paths, hosts) and xdups (content on
// two hosts or more, largest first). Whereis is one prefix scan of
// bydigest; dups walks xdups; copies walks one host's paths, or every
// content, and counts the fresh holders of each. The meta bucket keeps
// the layout's version; an older view's content index is rebuilt from
// its files at open.
//
// A bbolt file rather than a JetStream key-value bucket: whereis needs
// the digest index, which a KV bucket cannot keep atomically with the
// records, and JetStream keeps every subject of a stream in memory (see
// BENCHMARKS.md for the figures).
//
// # Trust
//
// One host's credentials reach its own records and nothing else.
//
//   - Each host has its own user: a bcrypt password hash or an nkey. It
//     may publish only on its own subjects (changes, state requests,
//     queries) and read only its own inbox and acks.
//   - The subject names the sender. The hub answers a request only into
//     the inbox of the host its subject names. A reply subject anywhere
//     else is refused and counted. So is a request without one: that is
//     how JetStream's replies arrive when a host aims them elsewhere.
//     Only an answered request says a host is alive.
//   - The hub's own connection may publish only into the known hosts'
//     inboxes and acks and its own claims subject, and call only the
//     JetStream API its stream and the copy buckets need. Not even a bug
//     can write into a host's subjects.
//   - No host may make a JetStream call whose answer is larger than its
//     request (copybuckets.go): the server sends answers and a
//     consumer's deliveries wherever the caller says. A host reads its
//     copies through the hub (copyread.go), which answers into its inbox.
//   - A host keys its message ids with a secret of its own. The stream's
//     duplicate window spans every subject; no host can send first under
//     another's ids and have its batches dropped as duplicates.
//   - A state or ack names the host it is for. A host takes no other.
//   - Only the hosts of the configuration exist: Config.Hosts, Self and
//     the cluster's nodes. Messages for any other name are dropped. A
//     host removed from the configuration leaves the view, records and
//     all, at the next start.
//   - A batch is decoded within bounds before anything is allocated
//     (hubwire). One that does not decode or apply is dropped, logged
//     and counted (Stats); the host resends what the view lacks. It
//     never holds up other hosts' batches.
//   - Content is a digest and a size. Another host's claim of a digest
//     with another size is other content: it hides nothing.
//   - One publisher a host at a time: a copy of a host's machine (same
//     index, credentials and sequence numbers) is refused while the
//     host is heard, and its index never mixes with the host's. The
//     stream decides who holds a name, so every node of a cluster
//     decides alike (claim.go).
//
// What a host says of its own files is believed. A host whose
// credentials are stolen can claim copies it does not have, and copies
// counts them: remove it from the configuration.
//
// A hub without host credentials refuses to start. A listener on a
// non-loopback address needs TLS unless plaintext is allowed explicitly.
// The hub machine's own annexd and the hub's consumer connect in process
// with credentials made at start, which the network listener refuses.
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
// requests, and writes the claim each makes into the stream once between
// them; one answers each query. A host dials every node's URL and
// fails over between them. A host takes an ack from any node, because
// the stream keeps the batch for the others; a node that stays down
// holds batches back until the stream is full, and hosts then keep their
// changes until it returns.
package hub
