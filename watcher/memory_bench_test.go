package watcher

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// BenchmarkWatchMemoryPerDir measures the Go heap the watcher keeps per
// watched directory: a tree of ANNEXD_BENCH_DIRS directories (10,000
// unless set; 100 top directories) is made, watched whole, and the live
// heap after the set-up is compared with the one before, after a
// collection. Reports bytes a directory and the watches the kernel was
// asked for. Each inotify watch also costs the kernel about 1 KiB of
// unswappable memory, which fs.inotify.max_user_watches caps (the kernel
// sizes its default from RAM). ANNEXD_BENCH_TREE=DIR watches an existing
// tree instead (a real one: its directories hold a few subdirectories
// each, so it keeps many small maps where the made tree keeps 100 large).
//
//	ANNEXD_BENCH_DIRS=100000 go test -run '^$' -bench WatchMemoryPerDir -benchtime 1x ./watcher/
func BenchmarkWatchMemoryPerDir(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("ANNEXD_BENCH_DIRS")); err == nil && v > 0 {
		n = v
	}
	root, dirs := os.Getenv("ANNEXD_BENCH_TREE"), 0
	if root == "" {
		root, dirs = b.TempDir(), n+100+1
		for i := range n {
			if err := os.MkdirAll(filepath.Join(root, fmt.Sprintf("t%03d/d%07d", i%100, i)), 0o755); err != nil {
				b.Fatal(err)
			}
		}
	} else if dirs = countDirsUnder(b, root); dirs == 0 {
		b.Fatalf("ANNEXD_BENCH_TREE %s: no directory to watch", root)
	}
	var perDir float64
	watches := 0
	for b.Loop() {
		before := liveHeap()
		w, err := New([]string{root}, Options{})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		<-w.Events()
		after := liveHeap()
		watches = w.Status().Roots[0].Watches
		runtime.KeepAlive(w)
		cancel()
		<-done
		perDir = float64(after-before) / float64(dirs)
	}
	if watches < dirs {
		b.Logf("only %d of %d directories watched (fs.inotify.max_user_watches?)", watches, dirs)
	}
	b.ReportMetric(perDir, "heap-B/dir")
	b.ReportMetric(float64(watches), "watches")
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// countDirsUnder counts root and the directories under it, symbolic links
// not followed, as the watcher walks them.
func countDirsUnder(b *testing.B, root string) int {
	n := 0
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			n++
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
