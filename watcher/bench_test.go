package watcher

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// BenchmarkWatchSetupVsFind measures how long it takes to put a watch on
// every directory of the corpus (start until the initial Rescan) against
// `find T -printf '%s %T@\n'` in the same iteration, as a ratio.
func BenchmarkWatchSetupVsFind(b *testing.B) {
	root := os.Getenv("ANNEXD_CORPUS")
	if root == "" {
		root = "/work/corpus/T"
	}
	if _, err := os.Stat(root); err != nil {
		b.Skipf("no benchmark corpus at %s (set ANNEXD_CORPUS): %v", root, err)
	}
	var ratios, setups []float64
	watches := 0
	for b.Loop() {
		start := time.Now()
		if err := exec.Command("find", root, "-printf", "%s %T@\n").Run(); err != nil {
			b.Fatal(err)
		}
		find := time.Since(start)

		start = time.Now()
		w, err := New([]string{root}, Options{})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		<-w.Events()
		setup := time.Since(start)
		watches = w.Status().Roots[0].Watches
		cancel()
		<-done
		ratios = append(ratios, setup.Seconds()/find.Seconds())
		setups = append(setups, setup.Seconds())
	}
	b.ReportMetric(median(setups)*1000, "setup-ms")
	b.ReportMetric(median(ratios), "setup/find")
	b.ReportMetric(float64(watches), "watches")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkChangeLatency writes 1,000 files in a burst and measures, per
// file, the time from its close to its Changed event, minus Options.Quiet:
// the overhead the watcher adds to the quiet period (p50, p99).
func BenchmarkChangeLatency(b *testing.B) {
	const n = 1000
	quiet := time.Second
	var over []float64
	for b.Loop() {
		root := b.TempDir()
		w, err := New([]string{root}, Options{Quiet: quiet, NoInitialRescan: true})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		time.Sleep(100 * time.Millisecond) // let the root's watch be added
		closed := make(map[string]time.Time, n)
		for i := range n {
			p := fmt.Sprintf("%s/f%04d", root, i)
			if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
				b.Fatal(err)
			}
			closed[p] = time.Now()
		}
		for seen := 0; seen < n; {
			ev := <-w.Events()
			if t0, ok := closed[ev.Path]; ok && ev.Kind == Changed {
				over = append(over, (time.Since(t0) - quiet).Seconds())
				seen++
			}
		}
		cancel()
		<-done
	}
	slices.Sort(over)
	b.ReportMetric(over[len(over)/2]*1000, "p50-over-quiet-ms")
	b.ReportMetric(over[len(over)*99/100]*1000, "p99-over-quiet-ms")
}
