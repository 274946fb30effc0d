package hasher

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/key"
)

// treeFiles lists the regular files under $HASHER_TREE (default the shared
// corpus, /work/corpus/T) with their lstat, in walk order, warming the page
// cache; it skips when the tree is missing.
func treeFiles(b *testing.B) ([]string, []fsstat.FileInfo, int64) {
	root := os.Getenv("HASHER_TREE")
	if root == "" {
		root = "/work/corpus/T"
	}
	if _, err := os.Stat(root); err != nil {
		b.Skipf("no tree at %s (set HASHER_TREE): %v", root, err)
	}
	var paths []string
	var infos []fsstat.FileInfo
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := fsstat.Lstat(p)
		if err != nil {
			return err
		}
		if _, err := os.ReadFile(p); err != nil {
			return err
		}
		paths, infos, total = append(paths, p), append(infos, fi), total+fi.Size
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return paths, infos, total
}

// BenchmarkTreeCallers hashes a whole tree (warm cache) the way the
// indexer's workers do: callers each taking the next walked file and its
// lstat, calling HashStat. It compares the built-in policy, with as many
// callers as the indexer used to run, against the multi-buffer engine with
// small files in the lanes and the callers Streams asks for. Reported: wall
// time per pass and the process's CPU time, which the bench/perf.py ratios
// compare with bench/bareloop.
func BenchmarkTreeCallers(b *testing.B) {
	paths, infos, total := treeFiles(b)
	runs := []struct {
		name string
		p    Policy
	}{
		{"default", Policy{}},
		{"lanes", Policy{Batch: MultiBuffer}},
		{"lanes-large-only", Policy{Batch: MultiBuffer, SmallInline: true}},
	}
	for _, r := range runs {
		b.Run(r.name, func(b *testing.B) {
			h := New(r.p, nil)
			defer h.Close()
			callers := h.Streams()
			if r.name != "lanes" {
				callers = 2 * h.Policy().Workers
			}
			b.SetBytes(total)
			cpu0, t0 := processCPU(b), time.Now()
			for b.Loop() {
				next := make(chan int, 1024)
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						for i := range next {
							if _, err := h.HashStat(context.Background(), paths[i], key.SHA256E, infos[i]); err != nil {
								b.Error(err)
							}
						}
					})
				}
				for i := range paths {
					next <- i
				}
				close(next)
				wg.Wait()
			}
			n := float64(b.N)
			b.ReportMetric(time.Since(t0).Seconds()/n, "wall-s/pass")
			b.ReportMetric((processCPU(b)-cpu0).Seconds()/n, "cpu-s/pass")
			b.ReportMetric(float64(callers), "callers")
			b.ReportMetric(0, "ns/op")

		})
	}
}
