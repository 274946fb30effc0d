package hasher

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/key"
)

// The benchmarks of hashing speed hash files they just wrote, which the
// hasher would sync to disk first (their ctime is recent): they turn
// syncing off, and BenchmarkSyncRecent measures what it costs.
var noSync = readOpts{syncWindow: -1}

// benchSizes are the per-file sizes of git-annex's 2012 table, redone here.
var benchSizes = []int{1 << 10, 10 << 10, 50 << 10, 100 << 10, 1 << 20, 10 << 20, 100 << 20}

func benchSizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// BenchmarkPerFile is the whole-file cost, warm cache, of every way of
// hashing one file with SHA-256: inline (HashFile on the caller's
// goroutine), the pool (hand-off to a worker and back), and the external
// programs (fork, exec, hash on stdin, parse), each with the same stat and
// identity checks. Besides wall time it reports the CPU time used, this
// process's and its children's, which other load disturbs less.
func BenchmarkPerFile(b *testing.B) {
	routes := []struct {
		name string
		p    *Policy // nil: HashFile's way (without the sync)
		prog string
	}{
		{name: "inline"},
		{name: "pool", p: &Policy{InlineMax: -1, SyncWindow: -1}},
		{name: "sha256sum", p: &Policy{InlineMax: -1, ExternalMin: 1, SyncWindow: -1}, prog: "sha256sum"},
		{name: "openssl", p: &Policy{InlineMax: -1, ExternalMin: 1, SyncWindow: -1}, prog: "openssl"},
	}
	for _, size := range benchSizes {
		b.Run(benchSizeName(size), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "f.bin")
			writeFile(b, path, pattern(size))
			for _, r := range routes {
				b.Run(r.name, func(b *testing.B) {
					hashFn := func() error {
						_, err := hashFile(context.Background(), path, key.SHA256, nil, noSync)
						return err
					}
					if r.p != nil {
						p := *r.p
						if r.prog != "" {
							prog, err := exec.LookPath(r.prog)
							if err != nil {
								b.Skipf("%s not installed: %v", r.prog, err)
							}
							p.External = prog
						}
						h := New(p, nil)
						defer h.Close()
						hashFn = func() error {
							_, err := h.Hash(context.Background(), path, key.SHA256)
							return err
						}
					}
					b.SetBytes(int64(size))
					b.ResetTimer()
					cpu0 := processCPU(b) + childrenCPU(b)
					for b.Loop() {
						if err := hashFn(); err != nil {
							b.Fatal(err)
						}
					}
					cpu := processCPU(b) + childrenCPU(b) - cpu0
					b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
				})
			}
		})
	}
}

// BenchmarkReadSize hashes a 64 MiB file with each read size, with and
// without read-ahead.
func BenchmarkReadSize(b *testing.B) {
	const size = 64 << 20
	path := filepath.Join(b.TempDir(), "f.bin")
	writeFile(b, path, pattern(size))
	for _, ahead := range []int64{-1, 1} {
		for _, buf := range []int{64 << 10, 256 << 10, 512 << 10, 1 << 20, 4 << 20} {
			name := fmt.Sprintf("readahead=%v/buf=%dKiB", ahead > 0, buf>>10)
			b.Run(name, func(b *testing.B) {
				o := readOpts{bufSize: buf, readAhead: ahead, syncWindow: -1}
				b.SetBytes(size)
				cpu0 := processCPU(b)
				for b.Loop() {
					if _, err := hashFile(context.Background(), path, key.SHA256, nil, o); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, size, cpu0)
			})
		}
	}
}

// BenchmarkSHA256Impl measures the in-process SHA-256 on a buffer in
// memory (no file reading).
func BenchmarkSHA256Impl(b *testing.B) {
	buf := pattern(16 << 20)
	for _, impl := range []SHA256Impl{SHA256Std} {
		b.Run(string(impl), func(b *testing.B) {
			h, _ := newHash(key.SHA256, impl)
			b.SetBytes(int64(len(buf)))
			cpu0 := processCPU(b)
			for b.Loop() {
				h.Reset()
				h.Write(buf)
				h.Sum(nil)
			}
			reportCPU(b, int64(len(buf)), cpu0)
		})
	}
}

// BenchmarkBackends hashes a 64 MiB file with each backend.
func BenchmarkBackends(b *testing.B) {
	const size = 64 << 20
	path := filepath.Join(b.TempDir(), "f.bin")
	writeFile(b, path, pattern(size))
	for _, be := range []key.Backend{key.SHA256, key.SHA512, key.SHA384, key.BLAKE2B256, key.BLAKE2B512, key.SHA1, key.MD5} {
		b.Run(be.String(), func(b *testing.B) {
			b.SetBytes(size)
			cpu0 := processCPU(b)
			for b.Loop() {
				if _, err := hashFile(context.Background(), path, be, nil, noSync); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, size, cpu0)
		})
	}
}

// BenchmarkPoolManyLarge hashes 16 files of 8 MiB through a Hasher, all
// callers at once, with one or two workers, each file on its own
// (crypto/sha256, read-ahead) or the workers' multi-buffer engines.
func BenchmarkPoolManyLarge(b *testing.B) {
	const n, size = 16, 8 << 20
	dir := b.TempDir()
	var paths []string
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("f%02d", i))
		writeFile(b, p, pattern(size+i))
		paths = append(paths, p)
	}
	for _, workers := range []int{1, 2} {
		for _, eng := range []string{"single", "multibuffer"} {
			b.Run(fmt.Sprintf("workers=%d/%s", workers, eng), func(b *testing.B) {
				p := Policy{InlineMax: -1, Workers: workers, SyncWindow: -1}
				if eng == "multibuffer" {
					p.Batch = MultiBuffer
				}
				h := New(p, nil)
				defer h.Close()
				b.SetBytes(n * size)
				cpu0 := processCPU(b)
				for b.Loop() {
					errs := make(chan error, n)
					for _, path := range paths {
						go func() {
							_, err := h.Hash(context.Background(), path, key.SHA256)
							errs <- err
						}()
					}
					for range n {
						if err := <-errs; err != nil {
							b.Fatal(err)
						}
					}
				}
				reportCPU(b, n*size, cpu0)
			})
		}
	}
}

// processCPU is the CPU time this process has used: a benchmark's work per
// CPU second is steadier than its wall time when other programs load the
// machine.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return rusageCPU(&ru)
}

// childrenCPU is the CPU time used by this process's waited-for children
// (the external hashers).
func childrenCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return rusageCPU(&ru)
}

// reportCPU reports the bytes hashed per second of this process's CPU time
// since cpu0.
func reportCPU(b *testing.B, bytesPerOp int64, cpu0 time.Duration) {
	cpu := processCPU(b) - cpu0
	b.ReportMetric(float64(b.N)*float64(bytesPerOp)/cpu.Seconds()/1e6, "MB/cpu-s")
}

// BenchmarkSyncRecent is the cost of making a recently written file's data
// durable before its digest is returned, per file of 4 KiB and 256 KiB
// just rewritten in place (dirty in the page cache), hashed by four
// goroutines as the daemon's workers do, on the test's own file system and
// on loop-mounted XFS and ext4: without the sync (nosync), with fdatasync
// of each file (fdatasync), and as HashFile does it (epochs: the same, and
// a syncfs in the background after 32 files).
func BenchmarkSyncRecent(b *testing.B) {
	dirs := map[string]string{"tmp": b.TempDir()}
	for _, fs := range []loopfs.Kind{loopfs.XFS, loopfs.Ext4} {
		dirs[string(fs)] = newLoop(b, fs).Dir
	}
	const batch, workers = 64, 4
	for _, fs := range []string{"tmp", "xfs", "ext4"} {
		for _, size := range []int{4 << 10, 256 << 10} {
			dir := filepath.Join(dirs[fs], benchSizeName(size))
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			var paths []string
			for i := range batch {
				p := filepath.Join(dir, fmt.Sprintf("f%02d", i))
				writeFile(b, p, pattern(size))
				paths = append(paths, p)
			}
			for _, mode := range []string{"nosync", "fdatasync", "epochs"} {
				b.Run(fmt.Sprintf("%s/%s/%s", fs, benchSizeName(size), mode), func(b *testing.B) {
					o := readOpts{syncWindow: -1}
					switch mode {
					case "fdatasync":
						o = readOpts{noEpochs: true}
					case "epochs":
						o = readOpts{}
					}
					data := pattern(size)
					b.SetBytes(int64(size) * batch)
					for i := 0; i < b.N; i++ {
						b.StopTimer()
						data[0]++
						for _, p := range paths {
							writeFile(b, p, data)
						}
						b.StartTimer()
						hashConcurrently(b, paths, workers, o)
					}
					b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "µs/file")
				})
			}
		}
	}
}

// hashConcurrently hashes paths on n goroutines.
func hashConcurrently(b *testing.B, paths []string, n int, o readOpts) {
	next := make(chan string)
	errs := make(chan error, n)
	for range n {
		go func() {
			var err error
			for p := range next {
				if _, e := hashFile(context.Background(), p, key.SHA256, nil, o); e != nil {
					err = e
				}
			}
			errs <- err
		}()
	}
	for _, p := range paths {
		next <- p
	}
	close(next)
	for range n {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}
