package apiserver

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/annexd/annexd/api"
)

// Limits and timeouts of the server. They are generous for the one local
// user and small enough that a misbehaving client cannot hurt the daemon.
const (
	MaxBatchBytes     = 16 << 20 // body of one batch lookup request
	MaxLineBytes      = 64 << 10 // one line of a batch lookup request
	maxHeaderBytes    = 16 << 10
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 60 * time.Second
	idleTimeout       = 120 * time.Second
	shutdownGrace     = 5 * time.Second
	defaultWaitIdle   = 30 * time.Second
	maxWaitIdle       = 5 * time.Minute
	idlePollInterval  = 100 * time.Millisecond
)

// Parts are what a server serves: the index, and the parts a daemon may
// run without. A nil part's endpoints answer 404 naming what is off and
// how to turn it on.
type Parts struct {
	Index api.Index   // required: lookup, whereis, dups, status, forget
	Audit api.Auditor // /v1/audit/...
	// Heal heals corrupt files from verified copies: /v1/audit/heal.
	Heal  api.AuditHealer
	Dedup api.Deduper // /v1/dedup
	Hub   api.Hubber  // /v1/hub/...
	Have  Haver       // /v1/have
	// DirDups finds duplicate folders: /v1/dups/dirs (dirdups.go).
	DirDups DirDupFinder
	// Changes is the change feed: /v1/changes (changes.go).
	Changes api.ChangeFeed
	// Tree counts the tree by folder: /v1/tree (tree.go).
	Tree api.Treer
}

// What a missing part's endpoints answer: what is off, and how to turn
// it on.
const (
	noAudit = "this daemon does not audit: it was started without its audit part " +
		"(annexd always has one; [audit] disabled only stops its schedule)"
	noDedup = "this daemon cannot deduplicate: it was started without its dedup part " +
		"(annexd always has one; [dedup] continuous only adds the background mode)"
	noHub  = "set [publish] hub in its config to publish to a hub, or [hub] enabled to run one here"
	noHave = "this daemon cannot answer have: it was started without its have part " +
		"(annexd always has one)"
	noDirDups = "this daemon does not find duplicate folders: it was started without that part " +
		"(annexd always has one)"
)

// Starting is a daemon that listens before it serves (Config.Starting).
type Starting interface {
	// Phase says what the daemon does meanwhile ("calibrating hashing").
	Phase() string
	// Status is the daemon's status meanwhile, with Starting set.
	Status(ctx context.Context) (api.Status, error)
}

// Config configures a Server. Socket is required, and Index unless
// Starting is set.
type Config struct {
	// Parts are served from the start. A daemon that listens before it
	// has its parts leaves them out, sets Starting and calls Ready.
	Parts
	// Starting is the daemon before Ready: until then the server answers
	// ping, status (Starting's) and metrics, and 503 with CodeStarting to
	// the rest; a status long poll waits for Ready first.
	Starting Starting

	Socket string // unix socket path, e.g. from DefaultSocketPath

	// RootAliases maps another spelling of a root, a path through a
	// symlink, to the root as Index.Roots has it. A path under an alias is
	// looked up under the root and answered under the spelling asked.
	// Forget takes its path as the index stores it.
	RootAliases map[string]string

	// TCPAddr, when set, also serves on this loopback address
	// ("127.0.0.1:7777"); every TCP request must carry
	// "Authorization: Bearer <Token>". Token is required with TCPAddr.
	TCPAddr string
	Token   string

	Version string       // daemon version for /v1/ping
	Logger  *slog.Logger // nil: discard

	// Registerer receives the server's request metrics; Gatherer is served
	// on /metrics (the daemon's own metrics included). Nil: a private
	// registry for both.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer

	// Limits caps the connections held at once; the zero value derives
	// the caps from the descriptor limit.
	Limits Limits

	// Page configures the web page's listener, opened when POST /v1/ui
	// first asks (page.go).
	Page PageConfig
}

// Server serves an Index over HTTP on a unix socket (and optionally TCP).
type Server struct {
	cfg     Config
	parts   atomic.Pointer[Parts] // nil until Ready, when Starting
	ready   chan struct{}         // closed by Ready
	log     *slog.Logger
	uid     int
	metrics *metrics
	http    *http.Server
	closing chan struct{}

	admission *admission
	refusals  refusalLog

	api  http.Handler // the endpoints, behind the socket's guard and the page's
	page page

	mu       sync.Mutex
	unixLn   *net.UnixListener
	tcpLn    net.Listener
	lockFile *os.File
}

// NewServer checks cfg and returns a server that is not yet listening.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Index == nil && cfg.Starting == nil {
		return nil, fmt.Errorf("%w: no index", ErrConfig)
	}
	if err := checkSocketPath(cfg.Socket); err != nil {
		return nil, err
	}
	if cfg.TCPAddr != "" {
		if err := checkLoopback(cfg.TCPAddr); err != nil {
			return nil, err
		}
		if len(cfg.Token) < 16 {
			return nil, fmt.Errorf("%w: tcp needs a token of at least 16 characters", ErrConfig)
		}
	}
	if err := checkPage(cfg.Page); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil || cfg.Gatherer == nil {
		reg := prometheus.NewRegistry()
		if cfg.Registerer == nil {
			cfg.Registerer = reg
		}
		if cfg.Gatherer == nil {
			cfg.Gatherer = reg
		}
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	uid := os.Geteuid()
	s := &Server{cfg: cfg, log: cfg.Logger, uid: uid, metrics: m, closing: make(chan struct{}), ready: make(chan struct{}),
		admission: newAdmission(uid, cfg.Limits), refusals: refusalLog{log: cfg.Logger}}
	if cfg.Starting == nil {
		s.Ready(cfg.Parts)
	}
	if err := m.watchConns(cfg.Registerer, s.admission); err != nil {
		return nil, err
	}
	s.page.token = newPageToken()
	s.api = s.endpoints()
	s.http = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnContext:       connContext,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Listen binds the socket (and the TCP address, if configured). Run calls
// it when it has not been called; calling it first lets the daemon report
// "socket in use" before it starts other work.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unixLn != nil {
		return nil
	}
	ln, lock, err := listenUnix(s.cfg.Socket)
	if err != nil {
		return err
	}
	if s.cfg.TCPAddr != "" {
		addr := strings.Replace(s.cfg.TCPAddr, "localhost:", "127.0.0.1:", 1)
		tl, err := net.Listen("tcp", addr)
		if err != nil {
			ln.Close()
			lock.Close()
			return fmt.Errorf("%w on %s: %w", ErrListen, s.cfg.TCPAddr, err)
		}
		s.tcpLn = tl
	}
	s.unixLn, s.lockFile = ln, lock
	return nil
}

// TCPAddr returns the bound TCP address, or nil without TCP.
func (s *Server) TCPAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tcpLn == nil {
		return nil
	}
	return s.tcpLn.Addr()
}

// Run serves until ctx ends, then shuts down: in-flight requests get a few
// seconds to finish (status long polls return at once; a lookup waiting
// for a file is cut off when the connections close), then connections are
// closed. It returns nil after a shutdown caused by ctx.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.log.Info("api listening", "socket", s.cfg.Socket, "tcp", s.cfg.TCPAddr)
	errc := make(chan error, 2)
	n := 1
	go func() { errc <- s.http.Serve(guardedListener{s.unixLn, s}) }()
	if s.tcpLn != nil {
		n++
		go func() { errc <- s.http.Serve(guardedListenerTCP{s.tcpLn, s}) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		n--
	}
	s.shutdown()
	for ; n > 0; n-- {
		if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
			err = e
		}
	}
	s.lockFile.Close()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("apiserver: serve: %w", err)
	}
	return nil
}

func (s *Server) shutdown() {
	close(s.closing)
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		s.log.Warn("api shutdown timed out; closing connections", "err", err)
	}
	s.http.Close()
	s.stopPage(ctx)
}

// routes builds the handler tree: the guard in front of the endpoints.
func (s *Server) routes() http.Handler { return s.guard(s.api) }

// endpoints routes requests that passed the guard to each part's
// handlers.
func (s *Server) endpoints() http.Handler {
	c := s.common()
	idx := &indexHandlers{c}
	st := &statusHandlers{common: c, starting: s.cfg.Starting, ready: s.ready}
	au, dd := &auditHandlers{c}, &dedupHandlers{c}
	hv, hb := &haveHandlers{c}, &hubHandlers{common: c, idx: idx}
	dirs, ch, tr := &dirDupHandlers{c}, &changesHandlers{c}, &treeHandlers{c}
	mux := http.NewServeMux()
	handle := func(pattern string, h http.HandlerFunc) {
		mux.Handle(pattern, s.metrics.instrument(pattern, h))
	}
	handle("GET /v1/ping", s.handlePing)
	handle("GET /v1/lookup", s.serving(idx.lookup)) // index.go
	handle("POST /v1/lookup", s.serving(idx.lookupBatch))
	handle("GET /v1/whereis", s.serving(idx.whereis))
	handle("GET /v1/dups", s.serving(idx.dups))
	handle("POST /v1/dups", s.serving(idx.dups))
	handle("GET /v1/dups/dirs", s.serving(dirs.dirDups)) // dirdups.go
	handle("POST /v1/dups/dirs", s.serving(dirs.dirDups))
	handle("GET /v1/status", st.get) // status.go
	handle("POST /v1/forget", s.serving(idx.forget))
	handle("POST /v1/dedup", s.serving(dd.dedup))   // dedup.go
	handle("POST /v1/audit/run", s.serving(au.run)) // audit.go
	handle("GET /v1/audit/runs/{id}", s.serving(au.runGet))
	handle("GET /v1/audit/status", s.serving(au.status))
	handle("GET /v1/audit/problems", s.serving(au.problems))
	handle("GET /v1/audit/history", s.serving(au.history))
	handle("POST /v1/audit/pause", s.serving(au.pause(true)))
	handle("POST /v1/audit/resume", s.serving(au.pause(false)))
	handle("POST /v1/audit/accept", s.serving(au.accept))
	handle("POST /v1/audit/heal", s.serving(au.heal))
	handle("GET /v1/have", s.serving(hv.info)) // have.go
	handle("POST /v1/have", s.serving(hv.have))
	handle("GET /v1/hub/whereis", s.serving(hb.whereis)) // hub.go
	handle("GET /v1/hub/dups", s.serving(hb.dups))
	handle("GET /v1/hub/copies", s.serving(hb.copies))
	handle("GET /v1/hub/hosts", s.serving(hb.hosts))
	handle("GET /v1/changes", s.serving(ch.changes)) // changes.go
	handle("GET /v1/tree", s.serving(tr.level))      // tree.go
	handle("POST /v1/ui", s.handleUI)                // page.go
	mux.Handle("GET /metrics", s.metrics.instrument("GET /metrics",
		promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{ErrorLog: s.httpErrorLog()})))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "api: no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// common is what the server shares with the handlers of its parts.
func (s *Server) common() common {
	return common{parts: &s.parts, aliases: s.cfg.RootAliases, log: s.log, metrics: s.metrics, closing: s.closing}
}

func (s *Server) handlePing(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.Ping{OK: true, Version: s.cfg.Version, APIVersion: api.APIVersion})
}

// Ready gives the server the parts it serves from now on; it is called
// once, when Config.Starting is set. p.Index is required.
func (s *Server) Ready(p Parts) {
	s.parts.Store(&p)
	close(s.ready)
}

// serving answers 503 with CodeStarting before Ready, with what the
// daemon does meanwhile, and passes the request on after.
func (s *Server) serving(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.parts.Load() == nil {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, api.CodeStarting, "api: "+s.cfg.Starting.Phase())
			return
		}
		h(w, r)
	}
}

func (s *Server) httpErrorLog() promhttp.Logger {
	return slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
}

// guard admits only the daemon's own user and root on the unix socket, and
// only requests with the token on TCP.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := peerFrom(r.Context())
		if p.tcp {
			if !s.tokenOK(r.Header.Get("Authorization")) {
				s.metrics.denied.WithLabelValues("token").Inc()
				w.Header().Set("WWW-Authenticate", `Bearer realm="annexd"`)
				writeError(w, http.StatusUnauthorized, api.CodeUnauthorized, "api: missing or wrong bearer token")
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if !p.known || (p.uid != s.uid && p.uid != 0) {
			s.metrics.denied.WithLabelValues("uid").Inc()
			s.log.Warn("api refused peer", "uid", p.uid, "pid", p.pid)
			writeError(w, http.StatusForbidden, api.CodeForbidden,
				fmt.Sprintf("api: uid %d may not use this daemon (it runs as uid %d)", p.uid, s.uid))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) tokenOK(header string) bool {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1
}
