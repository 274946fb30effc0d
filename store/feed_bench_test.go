package store

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkFeedCost: the first index of the corpus (walk order, group
// commit with fsync) without and with the change feed, side by side:
// what logging every add costs in commit time, CPU and disk per record.
func BenchmarkFeedCost(b *testing.B) {
	files, src := corpusFiles(b)
	if fs, err := loadManifest(corpusManifest); err == nil && len(fs) > 0 {
		files, src = fs, corpusManifest
	}
	b.Logf("records from %s: %d", src, len(files))
	walk := walkOrder(files)
	for _, keep := range []int{-1, 0} {
		b.Run(fmt.Sprintf("feed=%v", keep == 0), func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				s := benchStore(b, Options{Feed: FeedOptions{Keep: keep}})
				c0 := cpuTime()
				b.StartTimer()
				load(b, s, walk)
				b.StopTimer()
				cpu += cpuTime() - c0
				b.ReportMetric(diskBytes(b, s)/float64(len(walk)), "diskbytes/file")
				b.StartTimer()
			}
			b.ReportMetric(float64(len(walk)*b.N)/b.Elapsed().Seconds(), "puts/s")
			b.ReportMetric(float64(len(walk)*b.N)/cpu.Seconds(), "puts/cpu-s")
		})
	}
}
