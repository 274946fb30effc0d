package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/annexd/annexd/api"
)

// BenchmarkDaemonLookup: point lookups (GET /v1/lookup, freshness check
// included) against the real annexd over its socket, from parallel
// clients in this process (-cpu 2: two client goroutines sharing the two
// cores with the daemon).
func BenchmarkDaemonLookup(b *testing.B) {
	var paths [][]byte
	d := startDaemon(b, func(root string) {
		for i := range 10000 {
			p := filepath.Join(root, fmt.Sprintf("d%02d", i%50), fmt.Sprintf("f%05d.txt", i))
			write(b, p, fmt.Sprint(i))
			paths = append(paths, []byte(p))
		}
	})
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := api.Dial(d.socket)
		defer c.Close()
		i := 0
		for pb.Next() {
			r, err := c.Lookup(context.Background(), paths[i%len(paths)], false)
			if err != nil || r.State != api.StateCurrent {
				b.Errorf("%+v %v", r, err)
				return
			}
			i += 13
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}
