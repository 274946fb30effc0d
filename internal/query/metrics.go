package query

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collectors export the index's totals, the records outside the roots,
// and the watcher's health, read at scrape time.
func (x *Index) Collectors() []prometheus.Collector {
	return []prometheus.Collector{collector{x}, healthCollector{x}}
}

// collector exports the index totals and the watcher's health, read at
// scrape time: annexd_index_* and annexd_watcher_*.
type collector struct{ x *Index }

var (
	descFiles     = prometheus.NewDesc("annexd_index_files", "Files in the index (records outside the roots included).", nil, nil)
	descBytes     = prometheus.NewDesc("annexd_index_bytes", "Total size of the indexed files.", nil, nil)
	descUnique    = prometheus.NewDesc("annexd_index_unique_digests", "Distinct digests among the hashed files.", nil, nil)
	descDupGroups = prometheus.NewDesc("annexd_index_duplicate_groups", "Digests held by at least two distinct inodes, over the whole index (records outside the roots included, unlike annexctl dups by default).", nil, nil)
	descDupBytes  = prometheus.NewDesc("annexd_index_duplicate_bytes", "Bytes of the duplicate groups' extra copies, size × (copies − 1), shared blocks or not, over the whole index (records outside the roots included).", nil, nil)
	descReclaim   = prometheus.NewDesc("annexd_index_reclaimable_bytes", "Bytes that sharing blocks would give back in the groups surveyed since their records last changed (blocks shared already, holes and hard links not counted); the other groups are in annexd_index_unsurveyed_duplicate_bytes.", nil, nil)
	descUnsurv    = prometheus.NewDesc("annexd_index_unsurveyed_duplicate_bytes", "Duplicate bytes of the groups without a survey of block sharing since their records last changed: what they would give back is not known, and is about this much at most.", nil, nil)
	descIndexSize = prometheus.NewDesc("annexd_index_file_bytes", "Bytes of the index file its pages fill (bbolt's high-water mark); the file runs up to 16 MiB longer, sparse, as room to grow.", nil, nil)
	descUngrouped = prometheus.NewDesc("annexd_index_ungrouped_files",
		"Hashed files not yet counted in the digest and duplicate gauges: a large scan merges them in batches.", nil, nil)
	descOutside = prometheus.NewDesc("annexd_index_outside_roots_files",
		"Records outside the configured roots (left from runs with other roots; annexctl forget drops them), as of the last check.", nil, nil)
	descWatches   = prometheus.NewDesc("annexd_watcher_watches", "inotify watches in use.", []string{"root"}, nil)
	descUnwatched = prometheus.NewDesc("annexd_watcher_unwatched_dirs", "Directories without a watch (degraded mode), by root.", []string{"root"}, nil)
	descDegraded  = prometheus.NewDesc("annexd_watcher_degraded", "1 when some directories of the root have no watch.", []string{"root"}, nil)
	descOverflows = prometheus.NewDesc("annexd_watcher_overflows_total", "inotify queue overflows since start.", []string{"root"}, nil)
	descWaiting   = prometheus.NewDesc("annexd_watcher_pending_paths", "Paths waiting for their quiet delay.", []string{"root"}, nil)
	descLastOver  = prometheus.NewDesc("annexd_watcher_last_overflow_timestamp_seconds",
		"Unix time of the root's latest inotify queue overflow; absent before the first.", []string{"root"}, nil)
	descLastScan = prometheus.NewDesc("annexd_watcher_last_rescan_timestamp_seconds",
		"Unix time of the root's latest rescan of the whole root (at start, after an overflow, in degraded mode).", []string{"root"}, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFiles, descBytes, descUnique, descDupGroups, descDupBytes, descReclaim, descUnsurv,
		descIndexSize, descUngrouped, descOutside, descWatches, descUnwatched, descDegraded, descOverflows, descWaiting,
		descLastOver, descLastScan} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if s, err := c.x.cfg.Store.Stats(); err == nil {
		gauge(descFiles, float64(s.Files))
		gauge(descBytes, float64(s.Bytes))
		gauge(descUnique, float64(s.Unique))
		gauge(descDupGroups, float64(s.DupGroups))
		gauge(descDupBytes, float64(s.Duplicate))
		gauge(descReclaim, float64(s.Reclaimable))
		gauge(descUnsurv, float64(s.Duplicate-s.SurveyedDup))
		gauge(descIndexSize, float64(s.IndexBytes))
		gauge(descUngrouped, float64(s.Ungrouped))
	}
	if o := c.x.outside.Load(); o != nil {
		gauge(descOutside, float64(o.files))
	}
	for _, r := range c.x.cfg.Watcher.Status().Roots {
		gauge(descWatches, float64(r.Watches), r.Root)
		gauge(descUnwatched, float64(r.Unwatched), r.Root)
		degraded := 0.0
		if r.Degraded {
			degraded = 1
		}
		gauge(descDegraded, degraded, r.Root)
		ch <- prometheus.MustNewConstMetric(descOverflows, prometheus.CounterValue, float64(r.Overflows), r.Root)
		gauge(descWaiting, float64(r.Pending), r.Root)
		if !r.LastOverflow.IsZero() {
			gauge(descLastOver, float64(r.LastOverflow.UnixNano())/1e9, r.Root)
		}
		if !r.LastRescan.IsZero() {
			gauge(descLastScan, float64(r.LastRescan.UnixNano())/1e9, r.Root)
		}
	}
}

// healthCollector exports what makes the daemon unhealthy besides the
// watch limit: annexd_watcher_unreadable_dirs and annexd_index_backlog_changes.
type healthCollector struct{ x *Index }

var (
	descUnreadable = prometheus.NewDesc("annexd_watcher_unreadable_dirs",
		"Directories of the root that annexd cannot read or watch (the root itself included); their records are kept, unchecked.", []string{"root"}, nil)
	descBacklog = prometheus.NewDesc("annexd_index_backlog_changes",
		"Changes the index writer holds because the index's file system is full; retried once there is room.", nil, nil)
)

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUnreadable
	ch <- descBacklog
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.x.cfg.Watcher.Status().Roots {
		ch <- prometheus.MustNewConstMetric(descUnreadable, prometheus.GaugeValue, float64(r.Unreadable), r.Root)
	}
	ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(c.x.cfg.Store.Backlog().Changes))
}
