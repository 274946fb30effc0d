package apiserver

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/api"
)

// Connection limits. A peer the daemon does not serve is refused at
// accept, before a byte is read, so it never holds a descriptor for
// long. The connections admitted are capped below the descriptor limit,
// per uid and in total, and a reserve of them is kept for the daemon's
// own user.
const (
	maxConnsCeiling = 1024 // the cap never exceeds this
	minConns        = 16   // nor falls below this
	refusalLogEvery = time.Minute
)

// Limits caps the connections a server holds at once. The zero value
// takes them from the descriptor limit (RLIMIT_NOFILE).
type Limits struct {
	// Conns caps all admitted connections: a quarter of the descriptor
	// limit by default, at most 1,024.
	Conns int
	// Reserve of Conns is kept for the daemon's own user: root and TCP
	// clients together hold at most Conns − Reserve. Default Conns/8.
	Reserve int
	// PerUID caps what one uid other than the daemon's own holds (all TCP
	// clients count as one). Default half of Conns − Reserve.
	PerUID int
}

// withDefaults fills in what l leaves zero.
func (l Limits) withDefaults() Limits {
	if l.Conns <= 0 {
		l.Conns = defaultConns()
	}
	if l.Reserve <= 0 || l.Reserve >= l.Conns {
		l.Reserve = max(l.Conns/8, 1)
	}
	if l.PerUID <= 0 {
		l.PerUID = max((l.Conns-l.Reserve)/2, 1)
	}
	return l
}

// defaultConns is a quarter of the descriptor limit, within bounds: the
// rest is for the index, the watcher and the files being hashed.
func defaultConns() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY {
		return maxConnsCeiling
	}
	return int(min(max(rl.Cur/4, minConns), maxConnsCeiling))
}

// tcpPeer is the uid the counts use for TCP clients.
const tcpPeer = -1

// admission counts admitted connections per peer uid and refuses those
// over the limits.
type admission struct {
	owner  int // the daemon's effective uid
	limits Limits

	mu    sync.Mutex
	total int
	byUID map[int]int
}

func newAdmission(owner int, l Limits) *admission {
	return &admission{owner: owner, limits: l.withDefaults(), byUID: make(map[int]int)}
}

// take admits one more connection of uid, or reports false.
func (a *admission) take(uid int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.limits
	switch {
	case uid == a.owner && a.total >= l.Conns:
		return false
	case uid != a.owner && (a.total >= l.Conns-l.Reserve || a.byUID[uid] >= l.PerUID):
		return false
	}
	a.total++
	a.byUID[uid]++
	return true
}

// release returns a connection taken by uid.
func (a *admission) release(uid int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.total--
	if a.byUID[uid]--; a.byUID[uid] <= 0 {
		delete(a.byUID, uid)
	}
}

// open is the number of admitted connections.
func (a *admission) open() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total
}

// guardedListener checks each unix connection's peer with SO_PEERCRED at
// accept. A uid other than the daemon's and root's gets a canned 403 and
// is closed at once; one over the limits gets a canned 503. Only
// admitted connections reach the HTTP server.
type guardedListener struct {
	*net.UnixListener
	srv *Server
}

// Accept returns the next admitted connection.
func (l guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		if gc := l.srv.admitUnix(c); gc != nil {
			return gc, nil
		}
	}
}

// admitUnix wraps c when its peer may use the daemon, else refuses it.
func (s *Server) admitUnix(c *net.UnixConn) net.Conn {
	p, err := peerCred(c)
	if err != nil || (p.uid != s.uid && p.uid != 0) {
		s.metrics.denied.WithLabelValues("uid").Inc()
		s.refusals.note(p.uid, p.pid, "uid")
		refuse(c, 403, api.CodeForbidden,
			fmt.Sprintf("api: uid %d may not use this daemon (it runs as uid %d)", p.uid, s.uid))
		return nil
	}
	return s.admit(c, p)
}

// admit counts c against its peer's limit; over it, c is refused.
func (s *Server) admit(c net.Conn, p peer) net.Conn {
	uid := p.uid
	if p.tcp {
		uid = tcpPeer
	}
	if !s.admission.take(uid) {
		s.metrics.denied.WithLabelValues("busy").Inc()
		s.refusals.note(uid, p.pid, "busy")
		refuse(c, 503, api.CodeBusy, "api: annexd has too many connections open; try again")
		return nil
	}
	return &guardedConn{Conn: c, peer: p, done: func() { s.admission.release(uid) }}
}

// guardedListenerTCP counts TCP connections against the limits; the
// token is checked per request.
type guardedListenerTCP struct {
	net.Listener
	srv *Server
}

// Accept returns the next admitted connection.
func (l guardedListenerTCP) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if gc := l.srv.admit(c, peer{uid: -1, tcp: true}); gc != nil {
			return gc, nil
		}
	}
}

// guardedConn is an admitted connection; Close gives its place back.
type guardedConn struct {
	net.Conn
	peer peer
	once sync.Once
	done func()
}

// Close closes the connection and releases its place once.
func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.done)
	return err
}

// refuse writes a canned HTTP answer without blocking or reading the
// request, then closes c. The client may have sent its request already;
// it still reads the answer, which the kernel queued before the close.
func refuse(c net.Conn, status int, code, msg string) {
	body := fmt.Sprintf(`{"error":%s,"code":%q}`+"\n", strconv.Quote(msg), code)
	retry := ""
	if status == 503 {
		retry = "Retry-After: 1\r\n"
	}
	resp := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n%sContent-Length: %d\r\n\r\n%s",
		status, statusText(status), retry, len(body), body)
	writeNow(c, []byte(resp))
	c.Close()
}

// writeNow writes b when the socket takes it at once; it never waits.
// A fresh connection's send buffer is empty, so the answer fits.
func writeNow(c net.Conn, b []byte) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Write(func(fd uintptr) bool {
		_, _ = unix.Write(int(fd), b) // non-blocking: EAGAIN rather than a wait
		return true
	})
}

func statusText(status int) string {
	if status == 403 {
		return "Forbidden"
	}
	return "Service Unavailable"
}

// refusalLog logs refused connections: the first of each uid and reason
// at once, then at most one summary a minute, so a flood cannot flood the
// log too.
type refusalLog struct {
	log *slog.Logger

	mu   sync.Mutex
	seen map[refusalKey]*refusalCount
}

type refusalKey struct {
	uid    int
	reason string
}

type refusalCount struct {
	n      int // refused since the last line
	logged time.Time
}

func (r *refusalLog) note(uid, pid int, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = make(map[refusalKey]*refusalCount)
	}
	k := refusalKey{uid, reason}
	c := r.seen[k]
	if c == nil {
		c = &refusalCount{}
		r.seen[k] = c
	}
	c.n++
	now := time.Now()
	if !c.logged.IsZero() && now.Sub(c.logged) < refusalLogEvery {
		return
	}
	msg := "api refused a peer: not the daemon's user"
	if reason == "busy" {
		msg = "api refused a connection: too many open"
	}
	r.log.Warn(msg, "uid", uid, "pid", pid, "refused", c.n)
	c.n, c.logged = 0, now
}
