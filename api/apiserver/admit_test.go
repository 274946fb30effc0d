package apiserver

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/testutil"
)

// heldConn is a connection that made one request and stays open.
type heldConn struct {
	c      net.Conn
	status string // the answer's status line
}

// hold connects with dial, sends one keep-alive ping and reads the
// status line of the answer, leaving the connection open.
func hold(t *testing.T, dial func() (net.Conn, error), token string) heldConn {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := "GET /v1/ping HTTP/1.1\r\nHost: annexd\r\n"
	if token != "" {
		req += "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Logf("write: %v", err) // a refused connection may be closed already
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	c.SetReadDeadline(time.Time{})
	return heldConn{c: c, status: strings.TrimSpace(line)}
}

// TestConnectionLimits: a server holds at most Limits.Conns connections;
// clients other than the daemon's own user (here TCP ones) get no more
// than Conns − Reserve, so the owner still gets in; over the limit a
// connection is answered 503 busy and closed, and places come back when
// connections close.
func TestConnectionLimits(t *testing.T) {
	const token = "0123456789abcdef0123"
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, t.TempDir())}, TCPAddr: "127.0.0.1:0", Token: token,
		Limits: Limits{Conns: 6, Reserve: 2, PerUID: 4}}, nil)
	tcp := func() (net.Conn, error) { return net.Dial("tcp", ts.srv.TCPAddr().String()) }
	unix := func() (net.Conn, error) { return net.Dial("unix", ts.socket) }

	var others []heldConn
	for range 4 {
		h := hold(t, tcp, token)
		if !strings.Contains(h.status, "200") {
			t.Fatalf("TCP client %d within the limit: %q", len(others)+1, h.status)
		}
		others = append(others, h)
	}
	if h := hold(t, tcp, token); !strings.Contains(h.status, "503") {
		t.Errorf("a fifth TCP client, into the owner's reserve: %q, want 503", h.status)
	}
	for i := range 2 {
		if h := hold(t, unix, ""); !strings.Contains(h.status, "200") {
			t.Errorf("the owner's connection %d, in its reserve: %q", i+1, h.status)
		}
	}
	if h := hold(t, unix, ""); !strings.Contains(h.status, "503") {
		t.Errorf("the owner over the whole limit: %q, want 503", h.status)
	}
	others[0].c.Close()
	waitOpen(t, ts.srv, 5) // the place comes back once the server has seen the close
	if _, err := ts.client.Ping(context.Background()); err != nil {
		t.Errorf("the owner after a place came back: %v", err)
	}
	m, err := ts.client.Metrics(context.Background())
	if err != nil || !strings.Contains(string(m), `annexd_api_denied_total{reason="busy"} 2`) {
		t.Errorf("busy refusals not counted (%v)", err)
	}
}

// TestPerUIDLimit: one uid other than the daemon's holds at most PerUID
// connections, even with places free.
func TestPerUIDLimit(t *testing.T) {
	const token = "0123456789abcdef0123"
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, t.TempDir())}, TCPAddr: "127.0.0.1:0", Token: token,
		Limits: Limits{Conns: 8, Reserve: 2, PerUID: 2}}, nil)
	tcp := func() (net.Conn, error) { return net.Dial("tcp", ts.srv.TCPAddr().String()) }
	for i := range 2 {
		if h := hold(t, tcp, token); !strings.Contains(h.status, "200") {
			t.Fatalf("TCP client %d within its uid's limit: %q", i+1, h.status)
		}
	}
	if h := hold(t, tcp, token); !strings.Contains(h.status, "503") {
		t.Errorf("a third TCP client over its uid's limit: %q, want 503", h.status)
	}
	if _, err := ts.client.Ping(context.Background()); err != nil {
		t.Errorf("the owner: %v", err)
	}
}

// TestClientRetriesBusy: a client refused with 503 busy retries with
// backoff and gets its answer once a place is free; one that never gets
// in says the daemon is busy.
func TestClientRetriesBusy(t *testing.T) {
	log := new(testutil.Buffer)
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, t.TempDir())}, Limits: Limits{Conns: 2, Reserve: 1},
		Logger: slog.New(slog.NewTextHandler(log, nil))}, nil)
	unix := func() (net.Conn, error) { return net.Dial("unix", ts.socket) }
	a, b := hold(t, unix, ""), hold(t, unix, "")
	if !strings.Contains(a.status, "200") || !strings.Contains(b.status, "200") {
		t.Fatalf("within the limit: %q %q", a.status, b.status)
	}
	c := api.Dial(ts.socket)
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		_, err := c.Ping(context.Background())
		done <- err
	}()
	for !strings.Contains(log.String(), "too many open") { // refused once: retrying now
		time.Sleep(5 * time.Millisecond)
	}
	a.c.Close() // a place comes free while the client retries
	if err := <-done; err != nil {
		t.Errorf("ping once a place came free: %v", err)
	}
	c.Close()
	waitOpen(t, ts.srv, 1)
	if h := hold(t, unix, ""); !strings.Contains(h.status, "200") {
		t.Fatalf("taking the place back: %q", h.status)
	}
	c.SetPatience(200 * time.Millisecond)
	if _, err := c.Ping(context.Background()); !errors.Is(err, api.ErrBusy) || !strings.Contains(err.Error(), "busy") {
		t.Errorf("ping while full: %v, want ErrBusy", err)
	}
}

// starting is a daemon calibrating before it serves idx (Config.Starting).
type starting struct{ idx *storeIndex }

func (starting) Phase() string { return "calibrating hashing" }

func (x starting) Status(ctx context.Context) (api.Status, error) {
	st, err := x.idx.Status(ctx)
	st.Starting, st.Idle = "calibrating hashing", false
	return st, err
}

// TestStarting: until the server is Ready, status answers (saying so),
// other requests get 503 starting, which the client retries, and a status
// long poll waits for the start.
func TestStarting(t *testing.T) {
	root := t.TempDir()
	idx := newStoreIndex(t, root)
	ts := startServer(t, Config{Starting: starting{idx}}, nil)
	st, err := ts.client.Status(context.Background())
	if err != nil || st.Starting != "calibrating hashing" || st.Idle {
		t.Errorf("status while starting: %+v %v", st, err)
	}
	c := api.Dial(ts.socket)
	defer c.Close()
	c.SetPatience(100 * time.Millisecond)
	_, err = c.Lookup(context.Background(), []byte(root), false)
	if !errors.Is(err, api.ErrStarting) || errors.Is(err, api.ErrServer) {
		t.Errorf("lookup while starting: %v, want ErrStarting", err)
	}
	st, err = ts.client.WaitIdle(context.Background(), 100*time.Millisecond)
	if err != nil || st.Idle || st.Starting == "" {
		t.Errorf("a wait that ends before the start: %+v %v", st, err)
	}
	done := make(chan api.Status, 1)
	go func() {
		st, err := ts.client.WaitIdle(context.Background(), time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- st
	}()
	ts.srv.Ready(Parts{Index: idx})
	if st := <-done; !st.Idle || st.Starting != "" {
		t.Errorf("the wait across the start: %+v", st)
	}
	if _, err := c.Lookup(context.Background(), []byte(root), false); err != nil {
		t.Errorf("lookup once started: %v", err)
	}
}

// waitOpen waits until the server counts n open connections.
func waitOpen(t *testing.T, s *Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.admission.open() != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections counted, want %d", s.admission.open(), n)
		}
	}
}
