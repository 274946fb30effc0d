package hublink

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the link to the hub (annexd_hub_*) and, on the
// hub's machine, what the hub knows of each host (annexd_hub_host_*).
type collector struct{ l *Link }

// Collector exports the link's metrics; a nil Link's collector exports
// none.
func (l *Link) Collector() prometheus.Collector { return collector{l} }

var (
	descHubConnected = prometheus.NewDesc("annexd_hub_connected", "1 while the connection to the hub is up.", nil, nil)
	descHubSeq       = prometheus.NewDesc("annexd_hub_seq", "The index's last change (its change log's sequence number).", nil, nil)
	descHubPublished = prometheus.NewDesc("annexd_hub_published_seq", "The last change the hub's stream took.", nil, nil)
	descHubAcked     = prometheus.NewDesc("annexd_hub_acked_seq", "The last change the hub has applied to its view.", nil, nil)
	descHubLag       = prometheus.NewDesc("annexd_hub_lag_changes", "Changes of the index the hub has not applied yet.", nil, nil)
	descHubResends   = prometheus.NewDesc("annexd_hub_resends_total", "Whole resends of the index begun since start.", nil, nil)
	descHostRecords  = prometheus.NewDesc("annexd_hub_host_records", "Paths the hub holds for the host.", []string{"host"}, nil)
	descHostSeen     = prometheus.NewDesc("annexd_hub_host_last_seen_timestamp_seconds",
		"Unix time the hub last heard from the host.", []string{"host"}, nil)
	descHostStale = prometheus.NewDesc("annexd_hub_host_stale",
		"1 when the host has not been heard from for longer than [hub] stale_after: its copies are not counted.", []string{"host"}, nil)
	descHubDropped = prometheus.NewDesc("annexd_hub_batches_dropped_total",
		"Batches the hub dropped unapplied, by host (empty: not configured) and reason.", []string{"host", "reason"}, nil)
	descHubRefused = prometheus.NewDesc("annexd_hub_requests_refused_total",
		"State requests and queries the hub did not answer, by host (empty: not configured) and reason.", []string{"host", "reason"}, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHubConnected, descHubSeq, descHubPublished, descHubAcked, descHubLag,
		descHubResends, descHostRecords, descHostSeen, descHostStale, descHubDropped, descHubRefused} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	l := c.l
	if l == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	p := l.publisher()
	if p == nil {
		gauge(descHubConnected, 0)
	} else {
		s := p.Status()
		gauge(descHubConnected, boolValue(s.Connected))
		gauge(descHubSeq, float64(s.Seq))
		gauge(descHubPublished, float64(s.Published))
		gauge(descHubAcked, float64(s.Acked))
		gauge(descHubLag, float64(s.Lag))
		ch <- prometheus.MustNewConstMetric(descHubResends, prometheus.CounterValue, float64(s.Resends))
	}
	if l.hub == nil {
		return
	}
	for _, h := range l.hub.Hosts() {
		gauge(descHostRecords, float64(h.Records), h.Name)
		if !h.LastSeen.IsZero() {
			gauge(descHostSeen, float64(h.LastSeen.UnixNano())/1e9, h.Name)
		}
		gauge(descHostStale, boolValue(h.Stale), h.Name)
	}
	st := l.hub.Stats()
	for r, n := range st.Dropped {
		ch <- prometheus.MustNewConstMetric(descHubDropped, prometheus.CounterValue, float64(n), r.Host, r.Reason)
	}
	for r, n := range st.Refused {
		ch <- prometheus.MustNewConstMetric(descHubRefused, prometheus.CounterValue, float64(n), r.Host, r.Reason)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
