package watcher

import (
	"context"
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
