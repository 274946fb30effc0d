package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// serveUnix runs h with net/http on a new unix socket and counts the
// connections it accepts.
func serveUnix(t *testing.T, h http.Handler) (string, *atomic.Int64) {
	t.Helper()
	dir, err := os.MkdirTemp("", "apit")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	srv := &http.Server{Handler: h, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock, &conns
}

func TestTransportBodies(t *testing.T) {
	big := strings.Repeat("0123456789", 100000)
	sock, conns := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/empty":
			w.WriteHeader(204)
		case "/length":
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			for i := 0; i < len(big); i += 7777 {
				io.WriteString(w, big[i:min(i+7777, len(big))])
				w.(http.Flusher).Flush()
			}
			w.Header().Set("X-Sum", "ok")
		case "/close":
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			w.Write(b)
		}
	}))
	tr := &transport{dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	defer tr.closeIdle()
	get := func(method, target string, body []byte) (int, string) {
		t.Helper()
		resp, err := tr.roundTrip(context.Background(), method, target, nil, body)
		if err != nil {
			t.Fatalf("%s %s: %v", method, target, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s %s: body: %v", method, target, err)
		}
		return resp.Status, string(b)
	}
	for range 3 {
		if st, b := get("GET", "/empty", nil); st != 204 || b != "" {
			t.Errorf("empty: %d %q", st, b)
		}
		if st, b := get("GET", "/length", nil); st != 200 || b != "hello" {
			t.Errorf("length: %d %q", st, b)
		}
		if st, b := get("GET", "/chunked", nil); st != 200 || b != big {
			t.Errorf("chunked: %d, %d bytes", st, len(b))
		}
		payload := bytes.Repeat([]byte("x"), 300000)
		if st, b := get("POST", "/echo", payload); st != 200 || b != string(payload) {
			t.Errorf("echo: %d, %d bytes", st, len(b))
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for sequential requests, want 1 kept", n)
	}
	if st, b := get("GET", "/close", nil); st != 200 || b != "bye" {
		t.Errorf("close: %d %q", st, b)
	}
	if st, _ := get("GET", "/length", nil); st != 200 || conns.Load() != 2 {
		t.Errorf("after Connection: close: %d, %d connections, want a new one", st, conns.Load())
	}
}

func TestTransportBadAnswers(t *testing.T) {
	for _, answer := range []string{
		"garbage\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",      // no last chunk
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n", // trailers cut
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",            // chunk cut
		"HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 70000) + "\r\n\r\n",
	} {
		dir, err := os.MkdirTemp("", "apit")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		ln, err := net.Listen("unix", filepath.Join(dir, "s"))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			c.Read(buf)
			io.WriteString(c, answer)
			c.Close()
		}()
		tr := &transport{dial: func(ctx context.Context) (net.Conn, error) {
			return net.Dial("unix", filepath.Join(dir, "s"))
		}}
		resp, err := tr.roundTrip(context.Background(), "GET", "/", nil, nil)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err == nil {
			t.Errorf("answer %.40q: no error", answer)
		} else if !errors.Is(err, ErrBadResponse) && !errors.Is(err, ErrClosed) {
			t.Errorf("answer %.40q: %v, want a bad-response error", answer, err)
		}
		ln.Close()
	}
}
