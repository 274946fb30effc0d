package walker

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
)

// corpus is the benchmark tree: $ANNEXD_CORPUS or the shared corpus.
func corpus(b *testing.B) string {
	dir := os.Getenv("ANNEXD_CORPUS")
	if dir == "" {
		dir = "/work/corpus/T"
	}
	if _, err := os.Stat(dir); err != nil {
		b.Skipf("no benchmark corpus at %s (set ANNEXD_CORPUS; generate with gen_corpus.py): %v", dir, err)
	}
	return dir
}

// BenchmarkWalkCorpus compares Walk with 1, 2 and 4 workers against
// `find T -printf '%s %T@\n'` (the stat-only floor) and a plain
// filepath.WalkDir + lstat, in the same run. Compare ns/op as ratios.
func BenchmarkWalkCorpus(b *testing.B) {
	root := corpus(b)
	b.Run("find", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command("find", root, "-printf", "%s %T@\n")
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("walk-%d", workers), func(b *testing.B) {
			var n int
			for b.Loop() {
				n = 0
				err := Walk(context.Background(), root, Options{Workers: workers}, func(e Entry) error {
					n++
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n), "files")
		})
	}
	b.Run("walkdir-lstat", func(b *testing.B) {
		for b.Loop() {
			err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return err
				}
				_, err = fsstat.Lstat(p)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWalkVsFind alternates find and Walk within each iteration, so
// load from other processes hits both alike, and reports the median ratio
// Walk/find for 1, 2 and 4 workers.
func BenchmarkWalkVsFind(b *testing.B) {
	root := corpus(b)
	ratios := map[int][]float64{}
	var findTimes []float64
	for b.Loop() {
		start := time.Now()
		if err := exec.Command("find", root, "-printf", "%s %T@\n").Run(); err != nil {
			b.Fatal(err)
		}
		find := time.Since(start).Seconds()
		findTimes = append(findTimes, find)
		for _, workers := range []int{1, 2, 4} {
			start := time.Now()
			err := Walk(context.Background(), root, Options{Workers: workers}, func(Entry) error { return nil })
			if err != nil {
				b.Fatal(err)
			}
			ratios[workers] = append(ratios[workers], time.Since(start).Seconds()/find)
		}
	}
	b.ReportMetric(median(findTimes)*1000, "find-ms")
	for w, r := range ratios {
		b.ReportMetric(median(r), fmt.Sprintf("walk%d/find", w))
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkWalkBigTreeRSS walks $ANNEXD_BIG_TREE (e.g. 10^6 files) and
// reports the process's peak RSS, to show memory does not grow with the
// tree.
func BenchmarkWalkBigTreeRSS(b *testing.B) {
	root := os.Getenv("ANNEXD_BIG_TREE")
	if root == "" {
		b.Skip("set ANNEXD_BIG_TREE to a large tree (e.g. 10^6 files) to measure peak RSS")
	}
	n := 0
	for b.Loop() {
		n = 0
		err := Walk(context.Background(), root, Options{}, func(Entry) error { n++; return nil })
		if err != nil {
			b.Fatal(err)
		}
	}
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	b.ReportMetric(float64(n), "files")
	b.ReportMetric(float64(ru.Maxrss)/1024, "peak-RSS-MiB")
}
