package apiserver

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/annexd/annexd/api"
)

// The page: a web page for people, served on a listener of its own that
// the daemon opens when annexctl ui first asks (POST /v1/ui on the unix
// socket). A browser cannot open a unix socket, so the page listens on
// loopback TCP, and since every local user can reach that, every request
// must carry the token of this start of the daemon, as Jupyter's does:
//
//   - The URL annexctl prints carries ?token=T. The page answers it with a
//     cookie holding T (HttpOnly, SameSite=Strict, named by the port, as
//     cookies do not tell ports apart) and a redirect to the URL without
//     it, so the token leaves the address bar and the history.
//   - A request without the token, by cookie or by the X-Annexd-Token
//     header, gets 403.
//   - The Host header must name the loopback address the page listens
//     on, so that a name rebound to 127.0.0.1 (DNS rebinding) is refused.
//   - A request that changes anything (not GET or HEAD) must carry the
//     token in the X-Annexd-Token header, which another site's page
//     cannot set, and, when the browser says, come from the page's own
//     origin (Origin, Sec-Fetch-Site).
//
// The page's requests reach the same handlers as the socket's: one set
// of answers. Its assets are embedded: no CDN, no web fonts.

// pageCookie prefixes the name of the page's cookie; the port follows.
const pageCookie = "annexd_page_"

// pageTokenHeader carries the token on the page's own requests.
const pageTokenHeader = "X-Annexd-Token"

//go:embed ui
var uiFiles embed.FS

// PageConfig configures the page's listener.
type PageConfig struct {
	// Listen is the address it binds: "127.0.0.1:0" (a free port) when
	// empty. Beyond loopback it needs TLSCert and TLSKey.
	Listen string
	// TLSCert and TLSKey serve the page over TLS (PEM files).
	TLSCert, TLSKey string
	// ListenKey names the config key of Listen in errors ("ui.listen").
	ListenKey string
}

// page is the page's listener once started.
type page struct {
	mu    sync.Mutex
	token string
	ln    net.Listener
	srv   *http.Server
	tls   bool
	done  chan error
}

// newPageToken returns a fresh random token.
func newPageToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// checkPage refuses a page address beyond loopback without TLS.
func checkPage(c PageConfig) error {
	if c.Listen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("%w: %s %q: want host:port, such as 127.0.0.1:0", ErrConfig, c.ListenKey, c.Listen)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("%w: the page's TLS needs both a certificate and a key", ErrConfig)
	}
	if !isLoopbackHost(host) && c.TLSCert == "" {
		return fmt.Errorf("%w: %s = %q is not a loopback address: the page is served beyond this machine only over TLS, with hub.tls_cert and hub.tls_key set",
			ErrConfig, c.ListenKey, c.Listen)
	}
	return nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// startPage binds the page's listener at the first call and serves it
// until the server shuts down; it returns where the page is.
func (s *Server) startPage() (api.Page, error) {
	p := &s.page
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		if err := s.listenPage(); err != nil {
			return api.Page{}, err
		}
	}
	addr := p.ln.Addr().String()
	scheme := "http"
	if p.tls {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: addr, Path: "/", RawQuery: "token=" + p.token}
	return api.Page{URL: u.String(), Addr: addr, TLS: p.tls}, nil
}

// listenPage binds and starts serving; p.mu is held.
func (s *Server) listenPage() error {
	p, c := &s.page, s.cfg.Page
	select {
	case <-s.closing:
		return fmt.Errorf("%w: the daemon is stopping", ErrListen)
	default:
	}
	addr := c.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%w on %s (%s): %w", ErrListen, addr, c.ListenKey, err)
	}
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			ln.Close()
			return fmt.Errorf("%w: the page's TLS certificate: %w", ErrConfig, err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		p.tls = true
	}
	p.ln = ln
	p.srv = &http.Server{
		Handler:           s.pageHandler(ln.Addr().String()),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnContext:       connContext,
		ErrorLog:          s.http.ErrorLog,
	}
	p.done = make(chan error, 1)
	go func() { p.done <- p.srv.Serve(pageListener{ln, s, s.pagePeer()}) }()
	s.log.Info("page listening", "addr", ln.Addr().String(), "tls", p.tls)
	return nil
}

// stopPage shuts the page's listener down, if it was started.
func (s *Server) stopPage(ctx context.Context) {
	p := &s.page
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv == nil {
		return
	}
	if err := p.srv.Shutdown(ctx); err != nil {
		p.srv.Close()
	}
	if err := <-p.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Warn("page stopped", "err", err)
	}
}

// handleUI answers POST /v1/ui on the unix socket: it starts the page
// and says where it is.
func (s *Server) handleUI(w http.ResponseWriter, r *http.Request) {
	if peerFrom(r.Context()).tcp {
		writeError(w, http.StatusForbidden, api.CodeForbidden, "api: the page is started over the unix socket only (annexctl ui)")
		return
	}
	pg, err := s.startPage()
	if err != nil {
		writeError(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
		return
	}
	s.warmTree()
	writeJSON(w, http.StatusOK, pg)
}

// warmTree counts the tree while the browser starts, so that the page's
// first request finds the count made or under way (api.Treer keeps it
// until the index changes).
func (s *Server) warmTree() {
	p := s.parts.Load()
	if p == nil || p.Tree == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		go func() {
			select {
			case <-s.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		if _, err := p.Tree.TreeLevel(ctx, nil); err != nil && ctx.Err() == nil {
			s.log.Warn("page: cannot count the tree", "err", err)
		}
	}()
}

// pageHandler is the page's guard in front of its assets and the API's
// endpoints; addr is where the page listens.
func (s *Server) pageHandler(addr string) http.Handler {
	_, port, _ := net.SplitHostPort(addr)
	g := pageGuard{token: s.page.token, cookie: pageCookie + port, port: port, tls: s.page.tls}
	assets, _ := fs.Sub(uiFiles, "ui")
	files := http.FileServerFS(assets)
	mux := http.NewServeMux()
	mux.Handle("/v1/", s.api)
	mux.Handle("GET /metrics", s.api)
	mux.HandleFunc("GET /{$}", g.index)
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", files))
	return g.wrap(mux)
}

// pageGuard checks the token, the Host and the origin of every request
// to the page.
type pageGuard struct {
	token, cookie, port string
	tls                 bool
}

func (g pageGuard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		if !g.hostOK(r.Host) {
			pageRefuse(w, "annexd: this page answers only at its own address (127.0.0.1:"+g.port+"), not "+r.Host)
			return
		}
		if t := r.URL.Query().Get("token"); t != "" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			g.adopt(w, r, t)
			return
		}
		if !g.allowed(r) {
			pageRefuse(w, "annexd: this page needs its token: open the address that `annexctl ui` prints")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// adopt turns a token in the URL into the cookie, and sends the browser
// to the URL without it.
func (g pageGuard) adopt(w http.ResponseWriter, r *http.Request, t string) {
	if !g.same(t) {
		pageRefuse(w, "annexd: wrong token: the daemon restarted since? run `annexctl ui` again")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: g.cookie, Value: g.token, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: g.tls})
	q := r.URL.Query()
	q.Del("token")
	u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

// allowed reports whether r carries the token: by header, or, for a
// request that changes nothing, by cookie. A request that changes
// something must also come from the page's own origin.
func (g pageGuard) allowed(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
			return false
		}
		if o := r.Header.Get("Origin"); o != "" && !g.ownOrigin(o, r.Host) {
			return false
		}
		return g.same(r.Header.Get(pageTokenHeader))
	}
	if g.same(r.Header.Get(pageTokenHeader)) {
		return true
	}
	c, err := r.Cookie(g.cookie)
	return err == nil && g.same(c.Value)
}

func (g pageGuard) same(t string) bool {
	return t != "" && subtle.ConstantTimeCompare([]byte(t), []byte(g.token)) == 1
}

// hostOK reports whether host names the page's own address: a loopback
// name and the page's port. Over TLS the certificate names the host.
func (g pageGuard) hostOK(host string) bool {
	if g.tls {
		return true
	}
	h, port, err := net.SplitHostPort(host)
	return err == nil && port == g.port && isLoopbackHost(strings.Trim(h, "[]"))
}

// ownOrigin reports whether origin is the page's own.
func (g pageGuard) ownOrigin(origin, host string) bool {
	scheme := "http://"
	if g.tls {
		scheme = "https://"
	}
	return origin == scheme+host
}

// index serves the page, with the token for its requests' header.
func (g pageGuard) index(w http.ResponseWriter, r *http.Request) {
	b, err := uiFiles.ReadFile("ui/index.html")
	if err != nil {
		http.Error(w, "annexd: the page is missing from this build", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write([]byte(strings.Replace(string(b), "{{TOKEN}}", g.token, 1)))
}

func pageRefuse(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	w.Write([]byte(msg + "\n"))
}

// pagePeer is who the page's requests act as: the daemon's own user,
// with the daemon's groups. A root that asks for the page gets no more.
func (s *Server) pagePeer() peer {
	gids := []uint32{uint32(os.Getegid())}
	if gs, err := os.Getgroups(); err == nil {
		for _, g := range gs {
			gids = append(gids, uint32(g))
		}
	}
	return peer{uid: s.uid, known: true, tcp: true, page: true, gids: gids}
}

// pageListener counts the page's connections against the limits as TCP
// clients; each is the page's peer. The token is checked per request.
type pageListener struct {
	net.Listener
	srv  *Server
	peer peer
}

// Accept returns the next admitted connection.
func (l pageListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if gc := l.srv.admit(c, l.peer); gc != nil {
			return gc, nil
		}
	}
}
