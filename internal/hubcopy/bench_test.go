package hubcopy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/hubcopy"
)

// BenchmarkFetchAgainstCp fetches one file across the in-process hub
// (holder on an ext4 image, no pace) and copies the same bytes with cp,
// side by side in each round, and reports both rates. Each round fetches
// with the object store's default chunk (128 KiB) and with hubcopy's
// (1 MiB), so the two are compared under the same load. The source's
// cached pages are dropped before each read, so all read the disk.
// HUBCOPY_BENCH_MIB sets the file's size (default 128). bench/heal_hub.sh
// runs it.
func BenchmarkFetchAgainstCp(b *testing.B) {
	mib := 128
	if s := os.Getenv("HUBCOPY_BENCH_MIB"); s != "" {
		var err error
		if mib, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	size := mib << 20
	copyMaxBytes = int64(size) + 16<<20
	_, desktop, laptop, fs, _ := twoHosts(b, -1, false)
	k, _ := desktop.put(b, "big.bin", size)
	src := filepath.Join(fs.Dir, "big.bin")
	dst := b.TempDir()
	chunks := []uint32{128 << 10, *hubcopy.ChunkSize}
	defer func(c uint32) { *hubcopy.ChunkSize = c }(*hubcopy.ChunkSize)
	fetch := make([]time.Duration, len(chunks))
	fetchCPU := make([]time.Duration, len(chunks))
	var cp, cpCPU time.Duration
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, c := range chunks {
			*hubcopy.ChunkSize = c
			uncache(b, src)
			out, err := os.Create(filepath.Join(dst, "fetched"))
			if err != nil {
				b.Fatal(err)
			}
			began, cpu := time.Now(), cpuTime(unix.RUSAGE_SELF)
			if _, err := laptop.fetch(b, k, out); err != nil {
				b.Fatal(err)
			}
			fetch[j] += time.Since(began)
			fetchCPU[j] += cpuTime(unix.RUSAGE_SELF) - cpu
			out.Close()
		}
		uncache(b, src)
		began, cpu := time.Now(), cpuTime(unix.RUSAGE_CHILDREN)
		if msg, err := exec.Command("cp", src, filepath.Join(dst, "copied")).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v: %s", err, msg)
		}
		cp += time.Since(began)
		cpCPU += cpuTime(unix.RUSAGE_CHILDREN) - cpu
	}
	mbs := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	cpuPerGiB := func(d time.Duration) float64 { return d.Seconds() / (float64(size) * float64(b.N) / (1 << 30)) }
	for j, c := range chunks {
		b.ReportMetric(mbs(fetch[j]), fmt.Sprintf("fetch%dk_MB/s", c>>10))
		b.ReportMetric(fetch[j].Seconds()/cp.Seconds(), fmt.Sprintf("fetch%dk/cp", c>>10))
		b.ReportMetric(cpuPerGiB(fetchCPU[j]), fmt.Sprintf("fetch%dk_CPU-s/GiB", c>>10))
	}
	b.ReportMetric(mbs(cp), "cp_MB/s")
	b.ReportMetric(cpuPerGiB(cpCPU), "cp_CPU-s/GiB")
}

// cpuTime is the user and system CPU time of who (this process, or its
// children waited for).
func cpuTime(who int) time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// uncache drops the file's pages from the page cache.
func uncache(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
