// Package apiserver serves a daemon's parts over HTTP on a unix socket
// (and, if configured, loopback TCP with a bearer token), and admits only
// the daemon's own user and root.
//
// The parts are given, not discovered (Parts): the api.Index, and the
// audit, deduplication and hub, each of which may be absent; an absent
// part's endpoints answer 404 saying what to turn on. A daemon that
// listens before it has its parts gives Config.Starting and calls Ready
// once it has them.
//
// The endpoints, the wire format and the Index contract are documented in
// package api. This package adds what only a server needs: the socket
// directory and stale-socket handling, SO_PEERCRED checks at accept,
// connection caps (Limits), request limits and timeouts, Prometheus
// request metrics and /metrics, and a Run(ctx) lifecycle (Shutdown, then
// Close).
//
// The web page (page.go) is served on a listener of its own, opened when
// POST /v1/ui first asks: its guard (a token per start, a cookie, the
// Host and the origin checked) stands in front of the same endpoints and
// the page's embedded assets.
//
// The Server routes, admits and listens. Each part's handlers hang off a
// small type of their own (index.go, status.go, audit.go, dedup.go,
// hub.go, have.go), which holds what they all share (common): the
// parts, the log, the metrics and the shutdown signal.
//
// # Refusals
//
// A refused connection costs one accept, one getsockopt, one write and
// one close: a canned answer is written without waiting and without
// reading the request, and no goroutine is started for it. Refusals are
// logged once per uid and reason, then at most once a minute with a count.
//
// # Caveats
//
// A batch lookup body is read whole (at most MaxBatchBytes) before the
// answer starts, so that clients that write everything before they read
// cannot deadlock against it; the answer itself is streamed.
package apiserver
