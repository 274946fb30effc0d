package store

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkChangeLogCost: the first index of the corpus (walk order,
// group commit with fsync) with and without the change log: commit time
// and CPU per record, and the file's size before and after the log is
// trimmed (what a hub that acknowledged everything leaves).
func BenchmarkChangeLogCost(b *testing.B) {
	files, src := corpusFiles(b)
	if fs, err := loadManifest(corpusManifest); err == nil && len(fs) > 0 {
		files, src = fs, corpusManifest // the manifest alone is enough here
	}
	b.Logf("records from %s: %d", src, len(files))
	walk := walkOrder(files)
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("log=%v", on), func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				s := benchStore(b, Options{Changes: on})
				c0 := cpuTime()
				b.StartTimer()
				load(b, s, walk)
				b.StopTimer()
				cpu += cpuTime() - c0
				n := float64(len(walk))
				b.ReportMetric(diskBytes(b, s)/n, "diskbytes/file")
				b.ReportMetric(usedBytes(b, s)/n, "usedbytes/file")
				if on {
					st, err := s.ChangeLog()
					if err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					if err := s.TrimChanges(context.Background(), st.Seq); err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(time.Since(t0).Milliseconds()), "trim-ms")
					b.ReportMetric(diskBytes(b, s)/n, "trimmed-diskbytes/file")
					b.ReportMetric(usedBytes(b, s)/n, "trimmed-usedbytes/file")
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(len(walk)*b.N)/b.Elapsed().Seconds(), "puts/s")
			b.ReportMetric(float64(len(walk)*b.N)/cpu.Seconds(), "puts/cpu-s")
		})
	}
}

func diskBytes(b *testing.B, s *Store) float64 {
	fi, err := os.Stat(s.Path())
	if err != nil {
		b.Fatal(err)
	}
	return float64(fi.Sys().(*syscall.Stat_t).Blocks * 512)
}

// usedBytes is the size of the pages in use (the file less its free pages).
func usedBytes(b *testing.B, s *Store) float64 {
	var used int64
	_ = s.view(func(tx *bolt.Tx) error {
		used = tx.Size() - int64(freePages(tx))*int64(s.db.Info().PageSize)
		return nil
	})
	return float64(used)
}
