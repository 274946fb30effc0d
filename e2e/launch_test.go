package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
)

// launch starts annexd on a new temporary root with args before the root
// and returns at once: nothing waits for its socket or its first scan.
// setup, if not nil, fills the root first; wrap, if not nil, names a
// program (and its arguments) that runs annexd, such as prlimit.
func launch(t *testing.T, setup func(root string), wrap []string, args ...string) *daemon {
	t.Helper()
	base, root := newRoot(t, setup)
	return spawn(t, annexdRun{base: base, roots: []string{root}, extra: args, wrap: wrap, calibrate: true})
}

// openDir makes a directory any user may enter, with a copy of the
// executable at from inside it, and returns both paths: the test binaries
// live in directories only root may enter.
func openDir(t *testing.T, from string) (dir, exe string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "e2e-open")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	exe = filepath.Join(dir, filepath.Base(from))
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, exe
}

// exposeSocket links the daemon's socket into dir with mode 0666, so that
// other users reach the peer-credential check at all (the socket's own
// directory, mode 0700, stops them before it).
func exposeSocket(t *testing.T, d *daemon, dir string) string {
	t.Helper()
	link := filepath.Join(dir, "s")
	if err := os.Link(d.socket, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(link, 0o666); err != nil {
		t.Fatal(err)
	}
	return link
}

// startCtl runs annexctl in the background in the daemon's environment;
// the returned function waits for it and returns what it did.
func startCtl(t *testing.T, d *daemon, args ...string) func() result {
	t.Helper()
	done := make(chan result, 1)
	go func() { done <- runCtl(t, d.env, "", "", args...) }()
	return func() result { return <-done }
}

// waitConnections waits up to a minute until the number of API
// connections the daemon holds (its annexd_api_connections gauge, the
// connection of c that reads it included) satisfies ok.
func waitConnections(t *testing.T, c *api.Client, what string, ok func(n int) bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		m, err := c.Metrics(context.Background())
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		for _, line := range strings.Split(string(m), "\n") {
			if v, found := strings.CutPrefix(line, "annexd_api_connections "); found {
				if n, _ := strconv.Atoi(v); ok(n) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon never held %s:\n%s", what, m)
		}
	}
}
