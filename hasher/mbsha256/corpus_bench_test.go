package mbsha256

import (
	"cmp"
	"context"
	"crypto/sha256"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// corpusFiles lists the files of at least 1 MiB under $MBSHA256_CORPUS
// (default /work/corpus, the shared benchmark tree), or skips.
func corpusFiles(b *testing.B) ([]string, int64) {
	return corpusFilesSized(b, 1<<20, 1<<62)
}

// corpusFilesSized lists the corpus's files of lo ≤ size < hi bytes, with
// their total size, after reading them once to warm the page cache.
func corpusFilesSized(b *testing.B, lo, hi int64) ([]string, int64) {
	root := os.Getenv("MBSHA256_CORPUS")
	if root == "" {
		root = "/work/corpus"
	}
	// gen_corpus.py writes its manifest beside the tree once it is done.
	_, err := os.Stat(filepath.Join(root, ".done"))
	if _, merr := os.Stat(filepath.Clean(root) + ".manifest.tsv"); err != nil && merr != nil {
		b.Skipf("no finished benchmark corpus at %s (set MBSHA256_CORPUS): %v", root, err)
	}
	var paths []string
	var total int64
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() >= lo && info.Size() < hi {
			paths = append(paths, p)
			total += info.Size()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range paths { // warm the page cache
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		sha256.Sum256(data)
	}
	return paths, total
}

// hashFilesEngine hashes paths with one engine, as a pool worker would:
// each file is opened when a lane takes it and closed when its digest is
// known, so at most Lanes files are open at once.
func hashFilesEngine(e *Engine, paths []string) error {
	files := make([]*os.File, len(paths))
	var firstErr error
	fail := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	i := 0
	next := func() (io.Reader, bool) {
		if i == len(paths) {
			return nil, false
		}
		f, err := os.Open(paths[i])
		if err != nil {
			fail(err)
			f = nil
		}
		files[i] = f
		i++
		if f == nil {
			return nil, true // reported as ErrNilReader
		}
		return f, true
	}
	err := e.Hash(context.Background(), next, func(j int, r Result) {
		if files[j] != nil {
			files[j].Close()
		}
		if r.Err != nil {
			fail(r.Err)
		}
	})
	if err != nil {
		return err
	}
	return firstErr
}

// hashFilesCrypto hashes paths one after another with crypto/sha256 through a
// 64 KiB buffer.
func hashFilesCrypto(paths []string) error {
	buf := make([]byte, ChunkSize)
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.CopyBuffer(h, onlyReader{f}, buf)
		f.Close()
		if err != nil {
			return err
		}
		h.Sum(nil)
	}
	return nil
}

// largestFirst returns paths sorted by decreasing size.
func largestFirst(b *testing.B, paths []string) []string {
	sizes := map[string]int64{}
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			b.Fatal(err)
		}
		sizes[p] = info.Size()
	}
	sorted := slices.Clone(paths)
	slices.SortStableFunc(sorted, func(x, y string) int { return cmp.Compare(sizes[y], sizes[x]) })
	return sorted
}

// BenchmarkCorpusOneCore hashes the corpus's files of 1 MiB or more (warm
// cache) on one goroutine with the engine and with crypto/sha256, in thread
// CPU time (system time of the reads included); in walk order, and largest
// first, the order that keeps the most lanes busy while the big files run.
func BenchmarkCorpusOneCore(b *testing.B) {
	walked, total := corpusFiles(b)
	for _, name := range Kernels() {
		e, _ := NewKernel(name)
		for _, order := range []string{"walk", "largest-first", "walk-in-batches-of-lanes"} {
			paths := walked
			if order == "largest-first" {
				paths = largestFirst(b, walked)
			}
			hash := func(paths []string) error { return hashFilesEngine(e, paths) }
			if order == "walk-in-batches-of-lanes" {
				// A pool that hands the engine Lanes() files per call:
				// every call ends in its own tail.
				hash = func(paths []string) error {
					for len(paths) > 0 {
						n := min(len(paths), e.Lanes())
						if err := hashFilesEngine(e, paths[:n]); err != nil {
							return err
						}
						paths = paths[n:]
					}
					return nil
				}
			}
			b.Run(name+"/"+order, func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var te, tc time.Duration
				for range b.N {
					t0 := threadCPU(b)
					err1 := hash(paths)
					t1 := threadCPU(b)
					err2 := hashFilesCrypto(paths)
					if err1 != nil || err2 != nil {
						b.Fatal(err1, err2)
					}
					te += t1 - t0
					tc += threadCPU(b) - t1
				}
				mb := float64(total) * float64(b.N) / 1e6
				b.ReportMetric(mb/te.Seconds(), "engine-MB/s")
				b.ReportMetric(mb/tc.Seconds(), "crypto-MB/s")
				b.ReportMetric(tc.Seconds()/te.Seconds(), "x-crypto")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkCorpusSizeClasses hashes the corpus's files of each size class
// (largest first) on one goroutine, opening, reading and closing each file
// as a pool would, in thread CPU time: where the lanes still pay once the
// per-file system calls are counted.
func BenchmarkCorpusSizeClasses(b *testing.B) {
	e := New()
	for _, c := range []struct {
		name   string
		lo, hi int64
	}{{"0-4KiB", 0, 4 << 10}, {"4-16KiB", 4 << 10, 16 << 10}, {"16-64KiB", 16 << 10, 64 << 10}, {"64KiB-1MiB", 64 << 10, 1 << 20}} {
		b.Run(e.Kernel()+"/"+c.name, func(b *testing.B) {
			paths, total := corpusFilesSized(b, c.lo, c.hi)
			paths = largestFirst(b, paths)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var te, tc time.Duration
			for range b.N {
				t0 := threadCPU(b)
				err1 := hashFilesEngine(e, paths)
				t1 := threadCPU(b)
				err2 := hashFilesCrypto(paths)
				if err1 != nil || err2 != nil {
					b.Fatal(err1, err2)
				}
				te += t1 - t0
				tc += threadCPU(b) - t1
			}
			mb := float64(total) * float64(b.N) / 1e6
			b.ReportMetric(float64(len(paths)), "files")
			b.ReportMetric(mb/te.Seconds(), "engine-MB/s")
			b.ReportMetric(mb/tc.Seconds(), "crypto-MB/s")
			b.ReportMetric(tc.Seconds()/te.Seconds(), "x-crypto")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkCorpusTwoCores hashes the same files with two goroutines, each
// taking every other file, with an engine each and with crypto/sha256
// each; wall time, so it is as noisy as the machine.
func BenchmarkCorpusTwoCores(b *testing.B) {
	paths, total := corpusFiles(b)
	paths = largestFirst(b, paths)
	halves := [2][]string{}
	for i, p := range paths {
		halves[i%2] = append(halves[i%2], p)
	}
	two := func(f func(half []string) error) time.Duration {
		t0 := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, len(halves))
		for i, h := range halves {
			wg.Go(func() { errs[i] = f(h) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0)
	}
	for _, name := range Kernels() {
		b.Run(name, func(b *testing.B) {
			es := make(chan *Engine, 2)
			for range 2 {
				e, _ := NewKernel(name)
				es <- e
			}
			var te, tc time.Duration
			engine := func(half []string) error {
				e := <-es
				defer func() { es <- e }()
				return hashFilesEngine(e, half)
			}
			for i := range b.N {
				// Alternate which side goes first, so that neither is
				// always the one to meet a change in machine load.
				if i%2 == 0 {
					te += two(engine)
					tc += two(hashFilesCrypto)
				} else {
					tc += two(hashFilesCrypto)
					te += two(engine)
				}
			}
			mb := float64(total) * float64(b.N) / 1e6
			b.ReportMetric(mb/te.Seconds(), "engine-MB/s")
			b.ReportMetric(mb/tc.Seconds(), "crypto-MB/s")
			b.ReportMetric(tc.Seconds()/te.Seconds(), "x-crypto")
			b.ReportMetric(0, "ns/op")
		})
	}
}
