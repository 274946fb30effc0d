package api

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// pingServer serves /v1/ping (and any other path, with the same answer)
// with net/http on a unix socket, for the clients' benchmarks.
func pingServer(tb testing.TB) string {
	tb.Helper()
	sock := filepath.Join(tb.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	answer := []byte(`{"ok":true,"version":"bench","api_version":1}` + "\n")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	})}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return sock
}

// BenchmarkTransport: one GET and its whole body on a kept connection,
// through the package's own client (hand) and net/http's (net-http),
// against the same net/http server in one run.
func BenchmarkTransport(b *testing.B) {
	sock := pingServer(b)
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	ctx := context.Background()
	b.Run("hand", func(b *testing.B) {
		t := &transport{dial: dial}
		defer t.closeIdle()
		b.ReportAllocs()
		for b.Loop() {
			resp, err := t.roundTrip(ctx, "GET", "/v1/ping", nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.Run("net-http", func(b *testing.B) {
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		b.ReportAllocs()
		for b.Loop() {
			resp, err := c.Get("http://annexd/v1/ping")
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// BenchmarkClientStart: what annexctl pays at every start for its client.
// It builds two small programs that ping the same server once and exit,
// one through this package (testdata/startup/hand) and one through
// net/http and encoding/json (testdata/startup/nethttp), and runs them
// alternately. It reports each one's wall time a run, the ratio, and
// the size of each binary. Built with CGO_ENABLED=0, as annexctl is.
func BenchmarkClientStart(b *testing.B) {
	gotool, err := exec.LookPath("go")
	if err != nil {
		b.Skip("needs the go tool to build the two programs")
	}
	dir := b.TempDir()
	bins := map[string]string{}
	for _, name := range []string{"hand", "nethttp"} {
		bins[name] = filepath.Join(dir, name)
		cmd := exec.Command(gotool, "build", "-o", bins[name], "./testdata/startup/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("build %s: %v\n%s", name, err, out)
		}
	}
	sock := pingServer(b)
	var took [2]time.Duration
	for b.Loop() {
		for i, name := range []string{"hand", "nethttp"} {
			start := time.Now()
			if out, err := exec.Command(bins[name], sock).CombinedOutput(); err != nil {
				b.Fatalf("%s: %v\n%s", name, err, out)
			}
			took[i] += time.Since(start)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(took[0].Microseconds())/n, "hand-µs/run")
	b.ReportMetric(float64(took[1].Microseconds())/n, "nethttp-µs/run")
	b.ReportMetric(float64(took[0])/float64(took[1]), "hand/nethttp")
	for name, unit := range map[string]string{"hand": "hand-bytes", "nethttp": "nethttp-bytes"} {
		if fi, err := os.Stat(bins[name]); err == nil {
			b.ReportMetric(float64(fi.Size()), unit)
		}
	}
	b.ReportMetric(0, "ns/op")
}
