package apiserver

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/annexd/annexd/api"
)

// shortDir returns a fresh temporary directory with a short path (unix
// socket paths are limited to 107 bytes), removed after the test.
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "api")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// testServer is a server on a temporary socket with a client.
type testServer struct {
	srv    *Server
	client *api.Client
	socket string
	cancel context.CancelFunc
	done   chan error
}

// startServer serves idx on a new socket until the test ends; tweak, if
// not nil, adjusts the server before it starts.
func startServer(t testing.TB, cfg Config, tweak func(*Server)) *testServer {
	t.Helper()
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join(shortDir(t), "run", api.SocketName)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(srv)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{srv: srv, socket: cfg.Socket, cancel: cancel, done: make(chan error, 1),
		client: api.Dial(cfg.Socket)}
	go func() { ts.done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		ts.client.Close()
		if err := ts.stop(); err != nil {
			t.Errorf("server run: %v", err)
		}
	})
	return ts
}

// stop shuts the server down and returns Run's result; later calls
// return nil.
func (ts *testServer) stop() error {
	if ts.done == nil {
		return nil
	}
	ts.cancel()
	err := <-ts.done
	ts.done = nil
	return err
}

// writeFile creates dir/name with content and returns its path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// fileIno returns fi's inode number.
func fileIno(fi os.FileInfo) uint64 { return fi.Sys().(*syscall.Stat_t).Ino }

// unixHTTP is a plain HTTP client over the socket, for requests the api
// client does not make.
func unixHTTP(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
}
