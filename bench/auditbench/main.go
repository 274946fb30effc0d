// Command auditbench drives package audit over an existing index for the
// benchmarks in bench/audit.sh, until annexctl serves audits: one pass,
// timed, optionally with lookups running beside it. It prints one JSON
// object per measurement.
//
//	auditbench -index I -root R [-rate BYTES/s] [-workers N] [-full] [-lookups] [-cpuprofile F]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/audit"
	"github.com/annexd/annexd/internal/indexer"
	"github.com/annexd/annexd/store"
)

func main() {
	index := flag.String("index", "", "the index (made by annexd over -root)")
	root := flag.String("root", "", "the indexed tree")
	rate := flag.Int64("rate", -1, "rate cap in bytes a second; negative: none")
	workers := flag.Int("workers", 0, "readers; 0: the audit's default (or every CPU with -full)")
	full := flag.Bool("full", false, "full speed: every CPU, no cap, no gates")
	lookups := flag.Bool("lookups", false, "time lookups while idle, then during the pass")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the pass to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "auditbench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*index, *root, *rate, *workers, *full, *lookups); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "auditbench:", err)
		os.Exit(1)
	}
}

func run(index, root string, rate int64, workers int, full, lookups bool) error {
	st, err := store.Open(index, store.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	storeCtx, stopStore := context.WithCancel(context.Background())
	storeDone := make(chan struct{})
	go func() { defer close(storeDone); _ = st.Run(storeCtx) }()
	defer func() { stopStore(); <-storeDone }()

	h := hasher.New(hasher.DefaultPolicy(), nil)
	defer h.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := audit.New(st, h, audit.Options{Logger: log, Config: audit.Config{
		MaxRate: rate, Workers: workers, MaxLoad: -1, IgnoreBattery: true, Jitter: -1, Disabled: true}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.Run(ctx) }()

	var lk *looker
	if lookups {
		ix, err := indexer.New(st, h, indexer.Options{Roots: []string{root}, Logger: log})
		if err != nil {
			return err
		}
		if lk, err = newLooker(ctx, st, ix); err != nil {
			return err
		}
		emit(map[string]any{"phase": "idle", "lookups": lk.run(5*time.Second, nil)})
	}

	var id uint64
	for id == 0 {
		if id, err = a.Start(ctx, audit.StartOptions{FullSpeed: full}); err == audit.ErrStopped {
			id, err = 0, nil
			time.Sleep(time.Millisecond) // Run has not begun yet
		} else if err != nil {
			return err
		}
	}
	start, cpu0 := time.Now(), cpuTime()
	done := make(chan struct{})
	var during map[string]float64
	var lookWG sync.WaitGroup
	if lk != nil {
		lookWG.Add(1)
		go func() { defer lookWG.Done(); during = lk.run(time.Hour, done) }()
	}
	s, err := a.WaitRun(ctx, id)
	close(done)
	if err != nil {
		return err
	}
	el, cpu := time.Since(start).Seconds(), (cpuTime() - cpu0).Seconds()
	lookWG.Wait()
	emit(map[string]any{"phase": "pass", "files": s.Counts, "bytes": s.Bytes, "seconds": el, "cpu_seconds": cpu,
		"mb_per_s": float64(s.Bytes) / el / 1e6, "stopped_by": s.StoppedBy, "io_priority": a.Status().IOPriority, "lookups": during})
	return nil
}

func emit(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// looker times Lookup of random indexed paths, one every 2 ms.
type looker struct {
	ctx   context.Context
	ix    *indexer.Indexer
	paths []string
}

func newLooker(ctx context.Context, st *store.Store, ix *indexer.Indexer) (*looker, error) {
	l := &looker{ctx: ctx, ix: ix}
	err := st.Subtree(ctx, []byte("/"), func(p []byte, _ store.Record) error {
		l.paths = append(l.paths, string(p))
		return nil
	})
	return l, err
}

// run looks up paths until d has passed or stop is closed and returns the
// latency percentiles in milliseconds.
func (l *looker) run(d time.Duration, stop <-chan struct{}) map[string]float64 {
	var lat []float64
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	end := time.After(d)
	for {
		select {
		case <-t.C:
		case <-end:
			return pct(lat)
		case <-stop:
			return pct(lat)
		}
		p := l.paths[rand.IntN(len(l.paths))]
		t0 := time.Now()
		if _, err := l.ix.Lookup(l.ctx, p, false); err != nil {
			continue
		}
		lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
	}
}

func pct(lat []float64) map[string]float64 {
	if len(lat) == 0 {
		return nil
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	return map[string]float64{"n": float64(len(lat)), "p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": lat[len(lat)-1]}
}
