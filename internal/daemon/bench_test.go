package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	cfgpkg "github.com/annexd/annexd/internal/config"
	"github.com/annexd/annexd/store"
)

// BenchmarkChangeLatency measures how long a change takes to reach the
// index: from close(2) of a newly written file to its record (right digest)
// in the store, over 1,000 files written 5 ms apart into a running daemon
// with the default quiet delay (ANNEXD_BENCH_QUIET overrides it, e.g. 200ms).
// Run it once: go test -run '^$' -bench ChangeLatency -benchtime 1x.
func BenchmarkChangeLatency(b *testing.B) {
	quiet := time.Duration(0)
	if s := os.Getenv("ANNEXD_BENCH_QUIET"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatal(err)
		}
		quiet = d
	}
	for range b.N {
		lat := changeLatency(b, quiet, 1000)
		slices.Sort(lat)
		pct := func(p float64) float64 {
			return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
		}
		b.ReportMetric(pct(0.50), "p50-ms")
		b.ReportMetric(pct(0.99), "p99-ms")
		b.ReportMetric(float64(lat[len(lat)-1])/float64(time.Millisecond), "max-ms")
	}
}

func changeLatency(b *testing.B, quiet time.Duration, n int) []time.Duration {
	root := b.TempDir()
	base := b.TempDir()
	cfg := benchConfig(b, root, base, quiet)
	app, err := New(cfg, nil, Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	// The directories exist (and are watched) before the measured writes.
	for d := range 20 {
		if err := os.MkdirAll(filepath.Join(root, fmt.Sprintf("d%d", d)), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for app.ix == nil || !app.ix.Idle() {
		time.Sleep(10 * time.Millisecond)
	}

	type item struct {
		path   string
		digest [32]byte
		closed time.Time
	}
	var (
		mu      sync.Mutex
		waiting []item
		lat     []time.Duration
	)
	b.ResetTimer()
	go func() {
		for i := range n {
			p := filepath.Join(root, fmt.Sprintf("d%d", i%20), fmt.Sprintf("f%d.txt", i))
			data := []byte(fmt.Sprintf("change %d %s", i, time.Now()))
			if err := os.WriteFile(p, data, 0o644); err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			waiting = append(waiting, item{path: p, digest: sha256.Sum256(data), closed: time.Now()})
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	deadline := time.Now().Add(5 * time.Minute)
	for len(lat) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		mu.Lock()
		kept := waiting[:0]
		for _, it := range waiting {
			r, ok, err := app.st.Get([]byte(it.path))
			if err == nil && ok && r.State == store.StateOK && bytes.Equal(r.Digest, it.digest[:]) {
				lat = append(lat, time.Since(it.closed))
				continue
			}
			kept = append(kept, it)
		}
		waiting = kept
		mu.Unlock()
	}
	b.StopTimer()
	if len(lat) < n {
		b.Fatalf("only %d of %d changes reached the index", len(lat), n)
	}
	return lat
}

func benchConfig(b *testing.B, root, base string, quiet time.Duration) cfgpkg.Config {
	cfg := cfgpkg.Config{Roots: []string{root}, Index: filepath.Join(base, "index.db"), Socket: filepath.Join(base, "run", "annexd.sock")}
	cfg.Watch.QuietDelay = quiet
	if err := cfg.Fill(); err != nil {
		b.Fatal(err)
	}
	return cfg
}
