package apiserver

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// TestLongPollOutlivesReadTimeout: a status wait longer than the server's
// read timeout still gets its answer.
func TestLongPollOutlivesReadTimeout(t *testing.T) {
	idx := newStoreIndex(t, t.TempDir())
	idx.idle.Store(false)
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, func(s *Server) { s.http.ReadTimeout = 200 * time.Millisecond })
	st, err := ts.client.WaitIdle(context.Background(), time.Second)
	if err != nil || st.Idle {
		t.Fatalf("idle %v, %v; want a not-idle status after the wait", st.Idle, err)
	}
}

// TestStalledReaderReleased: a client that asks for a long stream and
// stops reading does not hold the handler beyond the write timeout.
func TestStalledReaderReleased(t *testing.T) {
	old := streamWriteTimeout
	streamWriteTimeout = 300 * time.Millisecond
	t.Cleanup(func() { streamWriteTimeout = old })
	root := t.TempDir()
	idx := newStoreIndex(t, root)
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	// 1,200 pairs of long paths: an answer far larger than the socket's
	// buffers. Their records go straight into the index; hashing 2,400
	// files first cost most of this test's CPU and is not what it tests.
	var cs []store.Change
	for i := range 2400 {
		content := fmt.Sprint(i / 2)
		p := filepath.Join(root, fmt.Sprintf("%d/%s", i%2, strings.Repeat("n", 200)+content))
		d := sha256.Sum256([]byte(content))
		cs = append(cs, store.Change{Op: store.OpPut, Path: []byte(p), Record: store.Record{Backend: key.SHA256E,
			Digest: d[:], Size: int64(len(content)), Ino: uint64(i + 1), HashedAt: time.Now().UnixNano(), State: store.StateOK}})
	}
	if err := idx.st.SubmitAll(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", ts.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /v1/dups HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	const done = `annexd_api_requests_total{code="200",route="GET /v1/dups"} 1`
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		m, err := ts.client.Metrics(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(m), done) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the dups handler is still blocked on a client that does not read")
		}
	}
}

// TestClientKeptConnection: the client reuses its connection, and when
// the server has closed it while idle, retries on a new one.
func TestClientKeptConnection(t *testing.T) {
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, t.TempDir())}}, func(s *Server) {
		s.http.IdleTimeout = 100 * time.Millisecond
	})
	ctx := context.Background()
	for i := range 3 {
		if _, err := ts.client.Ping(ctx); err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
		var n int
		err := ts.client.WhereisDigest(ctx, key.SHA256, make([]byte, 32), func(api.Location) error { n++; return nil })
		if err != nil || n != 0 {
			t.Fatalf("stream %d: %d, %v", i, n, err)
		}
		time.Sleep(300 * time.Millisecond) // the server drops the idle connection
	}
}

// TestClientCancel: a cancelled context ends a long poll at once.
func TestClientCancel(t *testing.T) {
	idx := newStoreIndex(t, t.TempDir())
	idx.idle.Store(false)
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := ts.client.WaitIdle(ctx, 4*time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want the context's deadline", err)
	}
	if _, err := ts.client.Ping(context.Background()); err != nil {
		t.Errorf("after a cancelled request: %v", err)
	}
}
