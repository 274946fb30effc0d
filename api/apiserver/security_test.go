package apiserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
)

// helperEnv makes the test binary act as a client for TestOtherUIDForbidden.
const helperEnv = "ANNEXD_API_TEST_DIAL"

// TestMain runs the dial helper when asked to, else the tests.
func TestMain(m *testing.M) {
	if sock := os.Getenv(helperEnv); sock != "" {
		os.Exit(dialHelper(sock))
	}
	os.Exit(m.Run())
}

// dialHelper pings the daemon at sock and asks it to forget, and prints
// what happened; exit 0 means both were refused with 403.
func dialHelper(sock string) int {
	c := api.Dial(sock)
	_, err := c.Ping(context.Background())
	_, ferr := c.Forget(context.Background(), []byte("/"), false)
	fmt.Printf("uid %d: %v; forget: %v\n", os.Getuid(), err, ferr)
	if errors.Is(err, api.ErrForbidden) && errors.Is(ferr, api.ErrForbidden) {
		return 0
	}
	return 1
}

const nobody = 65534

// TestOtherUIDForbidden runs a client as uid 65534 in a child process. To
// let that uid reach the peer-credential check at all, the test links the
// socket into a world-enterable directory and opens the socket's mode; the
// real socket directory (0700) would already stop it.
func TestOtherUIDForbidden(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a child process as uid 65534")
	}
	ts := startServer(t, Config{Parts: Parts{Index: newStoreIndex(t, t.TempDir())}}, nil)
	if _, err := ts.client.Ping(context.Background()); err != nil {
		t.Fatalf("own uid: %v", err)
	}
	open := shortDir(t)
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(open, "s")
	if err := os.Link(ts.socket, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(link, 0o666); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(open, "client.test")
	copyExecutable(t, os.Args[0], bin)

	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+link)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as uid %d was not refused: %v\n%s", nobody, err, out)
	}
	if !strings.Contains(string(out), "403") {
		t.Errorf("child output %q lacks the 403", out)
	}
	m, err := ts.client.Metrics(context.Background())
	if err != nil || !strings.Contains(string(m), `annexd_api_denied_total{reason="uid"} 2`) {
		t.Errorf("denied metric missing (%v)", err)
	}
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestSocketDirSafety(t *testing.T) {
	idx := newStoreIndex(t, t.TempDir())
	listen := func(sock string) error {
		srv, err := NewServer(Config{Parts: Parts{Index: idx}, Socket: sock})
		if err != nil {
			return err
		}
		if err := srv.Listen(); err != nil {
			return err
		}
		srv.unixLn.Close()
		srv.lockFile.Close()
		return nil
	}

	t.Run("created private", func(t *testing.T) {
		sock := filepath.Join(shortDir(t), "new", "deeper", api.SocketName)
		ts := startServer(t, Config{Parts: Parts{Index: idx}, Socket: sock}, nil)
		assertMode(t, filepath.Dir(sock), 0o700)
		assertMode(t, sock, 0o600)
		if _, err := ts.client.Ping(context.Background()); err != nil {
			t.Error(err)
		}
	})
	t.Run("group bits refused", func(t *testing.T) {
		dir := filepath.Join(shortDir(t), "d")
		if err := os.Mkdir(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, 0o750)
		if err := listen(filepath.Join(dir, api.SocketName)); !errors.Is(err, ErrUnsafeSocketDir) {
			t.Errorf("%v, want ErrUnsafeSocketDir", err)
		}
	})
	t.Run("other owner refused", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to chown a directory to another uid")
		}
		dir := filepath.Join(shortDir(t), "d")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		if err := listen(filepath.Join(dir, api.SocketName)); !errors.Is(err, ErrUnsafeSocketDir) {
			t.Errorf("%v, want ErrUnsafeSocketDir", err)
		}
	})
	t.Run("symlinked dir refused", func(t *testing.T) {
		base := shortDir(t)
		if err := os.Symlink(base, filepath.Join(base, "link")); err != nil {
			t.Fatal(err)
		}
		if err := listen(filepath.Join(base, "link", api.SocketName)); !errors.Is(err, ErrUnsafeSocketDir) {
			t.Errorf("%v, want ErrUnsafeSocketDir", err)
		}
	})
	t.Run("abstract and relative refused", func(t *testing.T) {
		for _, s := range []string{"@annexd", "\x00annexd", "rel/annexd.sock", "/" + strings.Repeat("x", 120)} {
			if err := listen(s); !errors.Is(err, ErrConfig) {
				t.Errorf("%q: %v, want ErrConfig", s, err)
			}
		}
	})
	t.Run("stale socket replaced", func(t *testing.T) {
		sock := filepath.Join(shortDir(t), api.SocketName)
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		ln.Close() // a dead daemon's socket file stays behind
		ts := startServer(t, Config{Parts: Parts{Index: idx}, Socket: sock}, nil)
		if _, err := ts.client.Ping(context.Background()); err != nil {
			t.Errorf("after replacing a stale socket: %v", err)
		}
	})
	t.Run("live socket kept", func(t *testing.T) {
		ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
		if err := listen(ts.socket); !errors.Is(err, ErrSocketInUse) {
			t.Errorf("%v, want ErrSocketInUse", err)
		}
		if _, err := ts.client.Ping(context.Background()); err != nil {
			t.Errorf("first server hurt: %v", err)
		}
	})
	t.Run("live socket without lock kept", func(t *testing.T) {
		sock := filepath.Join(shortDir(t), api.SocketName)
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if err := listen(sock); !errors.Is(err, ErrSocketInUse) {
			t.Errorf("%v, want ErrSocketInUse", err)
		}
	})
	t.Run("regular file kept", func(t *testing.T) {
		sock := writeFile(t, shortDir(t), api.SocketName, "precious")
		if err := listen(sock); !errors.Is(err, ErrConfig) {
			t.Errorf("%v, want ErrConfig", err)
		}
		if b, err := os.ReadFile(sock); err != nil || string(b) != "precious" {
			t.Errorf("file touched: %q %v", b, err)
		}
	})
}

func assertMode(t *testing.T, p string, want os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != want {
		t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
	}
}

// rawRequest sends raw bytes on a new connection and returns the status
// line, or "" when the server closed the connection without one.
func rawRequest(t *testing.T, sock string, req string, pause time.Duration, rest string) string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, req)
	if pause > 0 {
		time.Sleep(pause)
		io.WriteString(c, rest)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

func TestMalformedOversizedSlow(t *testing.T) {
	root := t.TempDir()
	idx := newStoreIndex(t, root)
	ts := startServer(t, Config{Parts: Parts{Index: idx}}, nil)
	status := func(method, target string, body string) int {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, "http://annexd"+target, rd)
		resp, err := unixHTTP(ts.socket).Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, target, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	cases := []struct {
		method, target, body string
		want                 int
	}{
		{"GET", "/v1/lookup", "", 400},
		{"GET", "/v1/lookup?path=rel", "", 400},
		{"GET", "/v1/lookup?path_b64=***", "", 400},
		{"GET", "/v1/lookup?path=" + root + "&wait=maybe", "", 400},
		{"GET", "/v1/lookup?path=/etc/passwd", "", 400},
		{"GET", "/v1/whereis", "", 400},
		{"GET", "/v1/whereis?key=nonsense", "", 400},
		{"GET", "/v1/whereis?key=WORM-s1--x", "", 400},
		{"GET", "/v1/whereis?digest=abc", "", 400},
		{"GET", "/v1/whereis?digest=00&backend=NOPE", "", 400},
		{"GET", "/v1/dups?min_size=-1", "", 400},
		{"GET", "/v1/dups?limit=x", "", 400},
		{"GET", "/v1/dups?after=***", "", 400},
		{"GET", "/v1/dups?resurvey=maybe", "", 400},
		{"POST", "/v1/dups", "", 400},
		{"POST", "/v1/dups", "/etc\n", 400},
		{"POST", "/v1/dups", `{"path":"/etc"}` + "\n", 400},
		{"POST", "/v1/dups", `{"path":"rel"}` + "\n", 400},
		{"POST", "/v1/dups", `{"path":"` + root + `"}` + "\n", 200},
		{"GET", "/v1/status?wait=forever", "", 400},
		{"GET", "/v1/status?wait=idle&timeout=soon", "", 400},
		{"GET", "/v2/ping", "", 404},
		{"DELETE", "/v1/lookup", "", 404},
		{"POST", "/v1/lookup", strings.Repeat("x", MaxBatchBytes+1), 413},
		{"GET", "/v1/ping", "", 200},
	}
	for _, c := range cases {
		if got := status(c.method, c.target, c.body); got != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.target, got, c.want)
		}
	}

	// Oversized and malformed heads, on the server with its own timeouts
	// (a loaded machine may take longer than a short one to read them).
	huge := "GET /v1/ping HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n"
	if got := rawRequest(t, ts.socket, huge, 0, ""); !strings.Contains(got, "431") {
		t.Errorf("huge header: %q, want 431", got)
	}
	if got := rawRequest(t, ts.socket, "GARBAGE\r\n\r\n", 0, ""); !strings.Contains(got, "400") {
		t.Errorf("garbage request line: %q, want 400", got)
	}

	// A server with short timeouts for the slow clients.
	ts = startServer(t, Config{Parts: Parts{Index: idx}}, func(s *Server) {
		s.http.ReadHeaderTimeout = 200 * time.Millisecond
		s.http.ReadTimeout = 400 * time.Millisecond
	})
	// A client that stops in the middle of its headers is cut off.
	slowHead := "GET /v1/ping HTTP/1.1\r\nHost: x\r\n"
	if got := rawRequest(t, ts.socket, slowHead, time.Second, "\r\n"); strings.Contains(got, "200") {
		t.Errorf("slow header answered: %q", got)
	}
	// A body that trickles in past the read timeout is not answered 200.
	slowBody := "POST /v1/lookup HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"path\":"
	if got := rawRequest(t, ts.socket, slowBody, time.Second, `"/x"}`); strings.Contains(got, "200") {
		t.Errorf("slow body answered: %q", got)
	}
	if _, err := ts.client.Ping(context.Background()); err != nil {
		t.Errorf("server hurt: %v", err)
	}
}
