package query

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// BenchmarkTreeFirstPaint1M: the page's first paint at 10^6 files in
// 50,000 folders (ANNEXD_BENCH_TREE_N sets another count), 15 % of the
// files copies of an earlier one: the top level counted from the index
// (every folder's files, then every duplicate group), then the next
// level from that count. ns/op is both; cold-ms/op the first (its CPU
// time cold-cpu-ms/op), warm-us/op the second; x-dups-listing is the first's CPU time over that of
// listing the index's duplicate groups beside it (the store's part of
// annexctl dups), the ratio the machine's load moves least.
func BenchmarkTreeFirstPaint1M(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("ANNEXD_BENCH_TREE_N")); err == nil {
		n = v
	}
	st, err := store.Open(filepath.Join(b.TempDir(), "index.db"), store.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = st.Run(ctx) })
	b.Cleanup(func() { cancel(); wg.Wait(); st.Close() })
	if err := st.SubmitAll(context.Background(), benchTreeChanges(n)); err != nil {
		b.Fatal(err)
	}
	if err := st.Settle(context.Background()); err != nil {
		b.Fatal(err)
	}
	x := New(Config{Store: st, Roots: roots.Of([]string{"/home/u"}, nil)})
	var cold, warm, coldCPU, listing time.Duration
	for b.Loop() {
		tr := NewTree(x) // no count kept: the first request counts
		t0, c0 := time.Now(), cpuTime()
		top, err := tr.TreeLevel(context.Background(), []byte("/home/u"))
		if err != nil {
			b.Fatal(err)
		}
		t1, c1 := time.Now(), cpuTime()
		if _, err := tr.TreeLevel(context.Background(), top.Children[0].Path); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		b.StopTimer()
		c2 := cpuTime()
		if err := st.Dups(context.Background(), store.DupOptions{Brief: true}, func(store.Group) error { return nil }); err != nil {
			b.Fatal(err)
		}
		cold, warm, coldCPU, listing = cold+t1.Sub(t0), warm+t2.Sub(t1), coldCPU+c1-c0, listing+cpuTime()-c2
		if top.Files != int64(n) {
			b.Fatalf("the top level counts %d files, want %d", top.Files, n)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(cold.Milliseconds())/float64(b.N), "cold-ms/op")
	b.ReportMetric(float64(coldCPU.Milliseconds())/float64(b.N), "cold-cpu-ms/op")
	b.ReportMetric(float64(warm.Microseconds())/float64(b.N), "warm-us/op")
	b.ReportMetric(float64(coldCPU)/float64(listing), "x-dups-listing")
}

// benchTreeChanges makes n records in n/20 folders under /home/u, 15 %
// of them copies of an earlier file (internal/dirdups' benchmark shape).
func benchTreeChanges(n int) []store.Change {
	rng := rand.New(rand.NewPCG(5, 6))
	tops := []string{"Documents", "Music", "Pictures", "Downloads", "src", "Videos"}
	dirs := max(n/20, 1)
	cs := make([]store.Change, 0, n)
	for d := range dirs {
		dir := fmt.Sprintf("/home/u/%s/project%d/sub%d/", tops[d%len(tops)], d/37, d)
		for i := range n / dirs {
			c := len(cs)
			if rng.Float64() < 0.15 {
				c = rng.IntN(c + 1)
			}
			dg := sha256.Sum256(binary.AppendUvarint(nil, uint64(c)))
			r := store.Record{Backend: key.SHA256E, Digest: dg[:], Size: int64(1000 + c%50000), Dev: 1, Ino: uint64(len(cs) + 1),
				MtimeNs: 1_700_000_000_000_000_000, CtimeNs: 1_700_000_000_000_000_000, HashedAt: 1_700_000_000_000_000_001}
			cs = append(cs, store.Change{Op: store.OpPut, Path: fmt.Appendf(nil, "%sfile_%d.dat", dir, i), Record: r})
		}
	}
	return cs
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
