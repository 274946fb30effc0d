package apiserver

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/annexd/annexd/api"
)

// benchTree creates n small indexed files under a new root and serves
// them; it returns the server and the paths.
func benchTree(b *testing.B, n int) (*testServer, [][]byte) {
	b.Helper()
	root := b.TempDir()
	paths := make([][]byte, n)
	for i := range paths {
		paths[i] = []byte(writeFile(b, root, filepath.Join(fmt.Sprintf("d%02d", i%100), fmt.Sprintf("f%06d.txt", i)), fmt.Sprint(i)))
	}
	ts := startServer(b, Config{Parts: Parts{Index: newStoreIndex(b, root)}}, nil)
	for i := 0; i < n; i += 4096 {
		err := ts.client.LookupBatch(context.Background(), paths[i:min(i+4096, n)], true, func(r api.LookupResult) error {
			if r.State != api.StateCurrent {
				return fmt.Errorf("%s: %s", r.Path, r.State)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return ts, paths
}

// BenchmarkServerLookup: one GET /v1/lookup per path over the socket, from
// parallel clients (freshness check included: lstat + store get).
func BenchmarkServerLookup(b *testing.B) {
	ts, paths := benchTree(b, 10000)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := api.Dial(ts.socket)
		defer c.Close()
		i := 0
		for pb.Next() {
			r, err := c.Lookup(context.Background(), paths[i%len(paths)], false)
			if err != nil || r.State != api.StateCurrent {
				b.Errorf("%+v %v", r, err)
				return
			}
			i += 7
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

// BenchmarkServerLookupBatch: POST /v1/lookup with 4,096 paths per
// request, one client.
func BenchmarkServerLookupBatch(b *testing.B) {
	ts, paths := benchTree(b, 10000)
	const chunk = 4096
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for i := 0; i < b.N; i++ {
		start := (i * chunk) % (len(paths) - chunk)
		err := ts.client.LookupBatch(context.Background(), paths[start:start+chunk], false, func(r api.LookupResult) error {
			n++
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "paths/s")
}
