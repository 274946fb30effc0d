// Package api is annexd's local HTTP API as its clients see it: the wire
// types, the Index interface the server needs of the daemon, the client
// annexctl uses, and the socket path daemon and client agree on. The server
// itself, with the peer-credential checks, is the subpackage apiserver; it
// is kept apart so that annexctl does not link (and initialise) the metrics
// libraries, which would cost it about a millisecond at every start.
//
// # Basics
//
// The server serves an Index (implemented by the daemon) under versioned
// paths:
//
//	GET  /v1/ping                         liveness, versions
//	GET  /v1/lookup?path=P[&wait=1]       one path → LookupResult (JSON)
//	POST /v1/lookup[?wait=1]              NDJSON paths in → NDJSON LookupResults out, in order
//	GET  /v1/whereis?key=K                NDJSON Locations (also digest=HEX[&backend=B], path=P);
//	                                      a key with a size lists only files of that size
//	GET  /v1/dups?min_size=N&limit=N&after=C[&outside=1][&resurvey=1]   NDJSON DupGroups, most duplicate bytes first
//	POST /v1/dups?…                       the same, of the groups with a file at or below a path of the body (NDJSON paths)
//	GET  /v1/dups/dirs?min_size=N&limit=N   NDJSON DirDups: duplicate folders, most reclaimable bytes first, then folders not compared
//	POST /v1/dups/dirs?…                  the same, of the folders at or below a path of the body (NDJSON paths)
//	GET  /v1/status[?wait=idle&timeout=30s]    Status (JSON); with wait, a long poll until idle
//	GET  /v1/have                         {"backend":B}: the backend a client hashes with (apiserver.Haver)
//	POST /v1/have                         NDJSON {"key":K} in → NDJSON HaveAnswers out, in order: the copies of each key's content
//	POST /v1/forget?path=DIR[&dry_run=1]  drop the records at or below DIR outside the roots → ForgetResult (JSON)
//	POST /v1/dedup[?dry_run=1&hardlink=1&min_size=N&groups=N|all&progress=1]   NDJSON paths in → NDJSON DedupEvents out ([Deduper])
//	POST /v1/audit/run[?time_limit=D&full_speed=1]   NDJSON paths in (none: all) → {"id":N} ([Auditor])
//	GET  /v1/audit/runs/{id}[?wait=1&timeout=D]      AuditRun; with wait, a long poll until the run ends
//	GET  /v1/audit/status                 AuditStatus (JSON)
//	GET  /v1/audit/problems               NDJSON AuditProblems: the files found corrupt, unreadable or with a lost write
//	GET  /v1/audit/history                {"passes": [AuditPassSummary...]}: the passes completed, oldest first (the last 100)
//	POST /v1/audit/pause, /v1/audit/resume   → AuditStatus; a pause holds across restarts
//	POST /v1/audit/accept?path=P          the flagged files at or below P take their content now → AuditAcceptResult
//	GET  /v1/hub/whereis?key=K            the hosts holding K's content → HubContent (also digest=, path=)
//	GET  /v1/hub/dups, /v1/hub/copies     NDJSON HubContents across hosts (see Hubber)
//	GET  /v1/hub/hosts                    the hosts the hub knows → HubHosts
//	GET  /v1/tree[?path=P]                one folder level: the folder (none: the roots) and its children → TreeLevel ([Treer])
//	POST /v1/ui                           start the web page (unix socket only) → Page
//	GET  /metrics                          Prometheus text format
//
// With wait=idle the status covers every change made before the request:
// the Index is synced first (within the timeout).
//
// A daemon listens before it serves its index: until then status says
// what it does ("starting") and every request but ping, status and
// metrics gets 503 with code "starting". Whereis of a key of another hash
// than the Index's Backend gets 400 with code "other_backend". A daemon
// without an audit, deduplication or a hub ([Auditor], [Deduper],
// [Hubber]) answers their endpoints with 404, code "not_supported" or
// "no_hub", saying what to turn on. The client retries 503 "starting" and
// "busy" answers with backoff.
//
// Every NDJSON stream ends with one line {"end":true,"count":N,...}; a stream
// without it was cut short. An error after the stream started is reported in
// that line ("error", "code"). Errors before a stream starts are a JSON body
// {"error":"...","code":"..."} with a 4xx or 5xx status.
//
// # Paths
//
// Paths are bytes. On the wire a path is the field "path", a display string
// (invalid UTF-8 replaced by U+FFFD), plus "path_b64" (standard base64 of the
// exact bytes) whenever the bytes are not valid UTF-8. Inputs accept either;
// path_b64 wins when both are present. In query strings use path= or
// path_b64= the same way.
//
// # Security
//
// The socket lives in a directory only the daemon's user may enter (mode 0700,
// owned by that user; an existing directory with group or other bits, or owned
// by someone else, is refused), the socket itself is 0600, and every
// connection's peer uid is read with SO_PEERCRED when it is accepted, before
// anything is read from it: anyone but the daemon's effective uid and root
// gets a 403 and the connection is closed at once. The connections admitted
// are capped below the descriptor limit, per uid and in total, with a
// reserve that only the daemon's own user may take; over a cap a
// connection gets 503 "busy". TCP
// is off unless configured, and then only on a loopback address and only
// with a bearer token.
package api
