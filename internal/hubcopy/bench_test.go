package hubcopy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkFetchAgainstCp fetches one file across the in-process hub
// (holder on an ext4 image, no pace) and copies the same bytes with cp,
// side by side in each round, and reports both rates. The source's
// cached pages are dropped before each, so both read the disk.
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
	var fetch, cp time.Duration
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		uncache(b, src)
		out, err := os.Create(filepath.Join(dst, "fetched"))
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		if _, err := laptop.fetch(b, k, out); err != nil {
			b.Fatal(err)
		}
		fetch += time.Since(began)
		out.Close()
		uncache(b, src)
		began = time.Now()
		if msg, err := exec.Command("cp", src, filepath.Join(dst, "copied")).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v: %s", err, msg)
		}
		cp += time.Since(began)
	}
	mbs := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbs(fetch), "fetch_MB/s")
	b.ReportMetric(mbs(cp), "cp_MB/s")
	b.ReportMetric(fetch.Seconds()/cp.Seconds(), "fetch/cp")
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
