package deduppart

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the counts of the runs asked for:
// annexd_dedup_requested_*. The background mode has its own collector.
type collector struct{ p *Part }

var (
	descAskedRuns  = prometheus.NewDesc("annexd_dedup_requested_runs_total", "Deduplication runs asked for through the API (dry runs included).", nil, nil)
	descAskedFreed = prometheus.NewDesc("annexd_dedup_requested_freed_bytes_total", "Bytes freed by deduplication runs asked for.", nil, nil)
	descAskedPairs = prometheus.NewDesc("annexd_dedup_requested_pairs_total", "Files made to share a keeper's storage by runs asked for.", nil, nil)
	descAskedSkips = prometheus.NewDesc("annexd_dedup_requested_skipped_total", "Actions of runs asked for that were skipped, by reason.", []string{"reason"}, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAskedRuns, descAskedFreed, descAskedPairs, descAskedSkips} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descAskedRuns, prometheus.CounterValue, float64(p.asked))
	ch <- prometheus.MustNewConstMetric(descAskedFreed, prometheus.CounterValue, float64(p.freed))
	ch <- prometheus.MustNewConstMetric(descAskedPairs, prometheus.CounterValue, float64(p.done))
	for r, n := range p.skips {
		ch <- prometheus.MustNewConstMetric(descAskedSkips, prometheus.CounterValue, float64(n), string(r))
	}
}
