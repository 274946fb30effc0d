package audit

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector of the audit's counters and
// gauges, named annexd_audit_*.
func (a *Auditor) Collector() prometheus.Collector { return &collector{a: a} }

type collector struct{ a *Auditor }

var (
	descFiles = prometheus.NewDesc("annexd_audit_files_total",
		"Files audited since the daemon started, by what was found.", []string{"class"}, nil)
	descBytes = prometheus.NewDesc("annexd_audit_verified_bytes_total",
		"Bytes read and found to match their records since the daemon started.", nil, nil)
	descCacheOnly = prometheus.NewDesc("annexd_audit_cache_only_files_total",
		"Files verified since the daemon started whose bytes came from the page cache only, not from a device, by why: "+
			"no_device (the file system keeps its files in memory), no_direct (it does not read directly), "+
			"cached (it reads the file through the page cache, which held some of it).", []string{"why"}, nil)
	descCacheOnlyBytes = prometheus.NewDesc("annexd_audit_cache_only_bytes_total",
		"Bytes of the files verified from the page cache only since the daemon started.", nil, nil)
	descTransient = prometheus.NewDesc("annexd_audit_transient_total",
		"Files whose first read disagreed with the record and a second read from the disk agreed.", nil, nil)
	descRunning = prometheus.NewDesc("annexd_audit_running",
		"1 while a run is reading, 0 otherwise.", nil, nil)
	descWaiting = prometheus.NewDesc("annexd_audit_waiting",
		"1 while a run waits for a closed gate (load, battery, the indexer).", nil, nil)
	descPaused = prometheus.NewDesc("annexd_audit_paused",
		"1 while the user has paused the audit.", nil, nil)
	descProblems = prometheus.NewDesc("annexd_audit_problems",
		"Files flagged corrupt, unreadable or with a lost write, as last counted.", nil, nil)
	descCovered = prometheus.NewDesc("annexd_audit_covered_files",
		"Records checked within the schedule's interval.", nil, nil)
	descAudited = prometheus.NewDesc("annexd_audit_auditable_files",
		"Records an audit re-reads.", nil, nil)
	descCoverage = prometheus.NewDesc("annexd_audit_coverage_ratio",
		"Share of the auditable records checked within the schedule's interval.", nil, nil)
	descPassDone = prometheus.NewDesc("annexd_audit_pass_done_files",
		"Files the pass in progress has decided.", nil, nil)
	descPassFiles = prometheus.NewDesc("annexd_audit_pass_files",
		"Files in the pass in progress when it began.", nil, nil)
	descLastPass = prometheus.NewDesc("annexd_audit_last_pass_end_timestamp_seconds",
		"When the last complete pass ended.", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFiles, descBytes, descCacheOnly, descCacheOnlyBytes, descTransient, descRunning, descWaiting, descPaused,
		descProblems, descCovered, descAudited, descCoverage, descPassDone, descPassFiles, descLastPass} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.a.Status()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	// Busy and Retry are files left to try again, never counted: no series.
	for cl := OK; cl < Busy; cl++ {
		ch <- prometheus.MustNewConstMetric(descFiles, prometheus.CounterValue, float64(s.Totals[cl.String()]), cl.String())
	}
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(s.BytesVerified))
	for src := FromDevice + 1; src < sourceEnd; src++ {
		ch <- prometheus.MustNewConstMetric(descCacheOnly, prometheus.CounterValue, float64(s.CacheOnly[src.String()]), src.String())
	}
	ch <- prometheus.MustNewConstMetric(descCacheOnlyBytes, prometheus.CounterValue, float64(s.CacheOnlyBytes))
	ch <- prometheus.MustNewConstMetric(descTransient, prometheus.CounterValue, float64(s.Transient))
	gauge(descRunning, flag(s.State == "running"))
	gauge(descWaiting, flag(s.State == "waiting"))
	gauge(descPaused, flag(s.State == "paused"))
	gauge(descProblems, float64(s.Problems))
	gauge(descCovered, float64(s.Coverage.Files))
	gauge(descAudited, float64(s.Coverage.Total))
	ratio := 1.0
	if s.Coverage.Total > 0 {
		ratio = float64(s.Coverage.Files) / float64(s.Coverage.Total)
	}
	gauge(descCoverage, ratio)
	if s.Pass != nil {
		gauge(descPassDone, float64(s.Pass.Done))
		gauge(descPassFiles, float64(s.Pass.Files))
	} else {
		gauge(descPassDone, 0)
		gauge(descPassFiles, 0)
	}
	if s.Last != nil {
		gauge(descLastPass, float64(s.Last.Ended)/1e9)
	}
}
