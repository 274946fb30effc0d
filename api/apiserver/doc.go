// Package apiserver serves an api.Index over HTTP on a unix socket (and, if
// configured, loopback TCP with a bearer token), and admits only the
// daemon's own user and root.
//
// The endpoints, the wire format and the Index contract are documented in
// package api. This package adds what only a server needs: the socket
// directory and stale-socket handling, SO_PEERCRED checks at accept,
// connection caps (Limits), request limits and timeouts, Prometheus
// request metrics and /metrics, and a Run(ctx) lifecycle (Shutdown, then
// Close).
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
