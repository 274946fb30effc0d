package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen makes a notify socket as systemd does and points $NOTIFY_SOCKET
// at it for the test.
func listen(t *testing.T, addr string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func read(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotify(t *testing.T) {
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, addr := range []string{filepath.Join(dir, "notify"), "@annexd-sdnotify-test-" + filepath.Base(dir)} {
		name := addr
		if addr[0] == '@' {
			name = "\x00" + addr[1:]
		}
		c := listen(t, name)
		t.Setenv(Env, addr)
		if err := Notify(Ready, Status("scanning\nsecond line")); err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		if got, want := read(t, c), "READY=1\nSTATUS=scanning second line\n"; got != want {
			t.Errorf("%s: got %q, want %q", addr, got, want)
		}
	}
}

func TestNotifyWithoutSocket(t *testing.T) {
	t.Setenv(Env, "")
	if err := Notify(Ready); err != nil {
		t.Errorf("unset %s: %v", Env, err)
	}
	t.Setenv(Env, "relative/path")
	if err := Notify(Ready); err == nil || !strings.Contains(err.Error(), Env) {
		t.Errorf("relative %s: %v", Env, err)
	}
}
