package query

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// BenchmarkTreeFirstPaint1M: the page's first paint at 10^6 files in
// 50,000 folders (ANNEXD_BENCH_TREE_N sets another count), 15 % of the
// files copies of an earlier one: the top level counted from the index,
// then the next level from that count. Each round counts the tree twice
// on one index, alternately: after (countTree, as the page does) and
// before (refCountTree: the duplicate groups listed with a path per
// member). For each it reports the first level's wall time (-ms), CPU
// time (-cpu-ms, steadier on a shared machine), bytes allocated
// (-alloc-MB) and the heap's peak above what it held before (-peak-MB,
// sampled every millisecond); after-next-us and after-next-alloc-KB are
// the next level's, from the count kept. x-cpu and x-alloc are after
// over before.
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
	set := roots.Of([]string{"/home/u"}, nil)
	x := New(Config{Store: st, Roots: set})
	var after, before, next paintCost
	for b.Loop() {
		tr := NewTree(x) // no count kept: the first request counts
		var top api.TreeLevel
		after.add(measure(func() {
			if top, err = tr.TreeLevel(context.Background(), []byte("/home/u")); err != nil {
				b.Fatal(err)
			}
		}))
		next.add(measure(func() {
			if _, err := tr.TreeLevel(context.Background(), top.Children[0].Path); err != nil {
				b.Fatal(err)
			}
		}))
		var ref api.TreeLevel
		before.add(measure(func() {
			c, err := refCountTree(context.Background(), st, set)
			if err == nil {
				ref, err = c.level([]byte("/home/u"))
			}
			if err != nil {
				b.Fatal(err)
			}
		}))
		if top.Files != int64(n) || top.Reclaimable != ref.Reclaimable || top.Bytes != ref.Bytes {
			b.Fatalf("the top level counts %d files, %d bytes, %d reclaimable; want %d files, before's %d bytes, %d reclaimable",
				top.Files, top.Bytes, top.Reclaimable, n, ref.Bytes, ref.Reclaimable)
		}
	}
	after.report(b, "after", b.N)
	before.report(b, "before", b.N)
	b.ReportMetric(float64(next.wall.Microseconds())/float64(b.N), "after-next-us")
	b.ReportMetric(float64(next.alloc)/1e3/float64(b.N), "after-next-alloc-KB")
	b.ReportMetric(float64(after.cpu)/float64(before.cpu), "x-cpu")
	b.ReportMetric(float64(after.alloc)/float64(before.alloc), "x-alloc")
}

// paintCost is what counting a level cost, summed over rounds.
type paintCost struct {
	wall, cpu   time.Duration
	alloc, peak uint64
}

func (p *paintCost) add(q paintCost) {
	p.wall, p.cpu, p.alloc, p.peak = p.wall+q.wall, p.cpu+q.cpu, p.alloc+q.alloc, p.peak+q.peak
}

func (p *paintCost) report(b *testing.B, name string, n int) {
	b.ReportMetric(float64(p.wall.Milliseconds())/float64(n), name+"-ms")
	b.ReportMetric(float64(p.cpu.Milliseconds())/float64(n), name+"-cpu-ms")
	b.ReportMetric(float64(p.alloc)/1e6/float64(n), name+"-alloc-MB")
	b.ReportMetric(float64(p.peak)/1e6/float64(n), name+"-peak-MB")
}

// measure runs fn after a collection and returns its wall and CPU time,
// the bytes it allocated and the heap's peak above its start.
func measure(fn func()) paintCost {
	runtime.GC()
	samples := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(samples)
	alloc0, heap0 := samples[0].Value.Uint64(), samples[1].Value.Uint64()
	stop, peak := make(chan struct{}), make(chan uint64)
	go func() {
		top := heap0
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			top = max(top, s[0].Value.Uint64())
			select {
			case <-stop:
				peak <- top - heap0
				return
			case <-tick.C:
			}
		}
	}()
	t0, c0 := time.Now(), cpuTime()
	fn()
	wall, cpu := time.Since(t0), cpuTime()-c0
	metrics.Read(samples)
	close(stop)
	return paintCost{wall: wall, cpu: cpu, alloc: samples[0].Value.Uint64() - alloc0, peak: <-peak}
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
