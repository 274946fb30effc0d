package indexer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// counters are the indexer's running totals since start.
type counters struct {
	filesSeen, bytesSeen     atomic.Int64 // by walks
	filesHashed, bytesHashed atomic.Int64
	retries                  atomic.Int64 // "changed while hashing"
	errors                   atomic.Int64
	renames                  atomic.Int64 // records moved instead of re-hashed
	unshelved                atomic.Int64 // records of a disk back in its place, taken off the shelf
	removed                  atomic.Int64 // records dropped
	scans                    atomic.Int64 // walks completed with a sweep
	onDemand                 atomic.Int64 // hashes run by Lookup
	early                    atomic.Int64 // large files queued ahead of their walk (expect.go)
}

// hashed counts one file of size bytes hashed.
func (m *counters) hashed(size int64) {
	m.filesHashed.Add(1)
	m.bytesHashed.Add(size)
}

// Progress is a snapshot of what the indexer has done and has left.
type Progress struct {
	InitialScanDone bool `json:"initial_scan_done"`
	// Idle: the initial scan is done and no change is on its way, in the
	// watcher, between it and the indexer, or in the indexer.
	Idle         bool `json:"idle"`
	ScansPending int  `json:"scans_pending"` // walks waiting or running
	// Watching counts the changes the watcher holds back (its quiet
	// delay) and the events it sent that are not handed over yet.
	Watching int `json:"watching"`

	FilesSeen   int64 `json:"files_seen"`
	BytesSeen   int64 `json:"bytes_seen"`
	FilesHashed int64 `json:"files_hashed"`
	BytesHashed int64 `json:"bytes_hashed"`
	FilesQueued int   `json:"files_queued"` // paths in the pipeline
	BytesQueued int64 `json:"bytes_queued"` // their sizes, where known
	Removals    int   `json:"removals_waiting"`

	Retries        int64 `json:"retries"`
	Errors         int64 `json:"errors"`
	Renames        int64 `json:"renames"`
	Unshelved      int64 `json:"unshelved"`
	Removed        int64 `json:"removed"`
	ScansCompleted int64 `json:"scans_completed"`
	OnDemandHashes int64 `json:"on_demand_hashes"`

	// HashRate is the mean hashing throughput since start, in bytes/s.
	HashRate float64 `json:"hash_rate"`
	// Walk is the progress of the scans of the period (WalkProgress);
	// nil when no scan goes on or is to come.
	Walk *WalkProgress `json:"walk,omitempty"`
	// Remaining estimates the time left to walk and hash everything
	// expected (expect.go); 0 when it cannot be told yet.
	Remaining time.Duration `json:"remaining_ns"`
	Uptime    time.Duration `json:"uptime_ns"`
}

// Progress returns a snapshot.
func (ix *Indexer) Progress() Progress {
	// Upstream first: work moves from the watcher to the hand-off, and
	// from scans and removals into the queue, so work moving between the
	// reads is counted once or twice, never missed.
	watching := ix.feed.held()
	done := ix.scans.initialDone()
	scans := ix.scans.pending()
	removals := ix.removals.len()
	n, b := ix.pipe.pend.stats()
	p := Progress{
		InitialScanDone: done,
		ScansPending:    scans,
		Watching:        watching,
		FilesSeen:       ix.m.filesSeen.Load(),
		BytesSeen:       ix.m.bytesSeen.Load(),
		FilesHashed:     ix.m.filesHashed.Load(),
		BytesHashed:     ix.m.bytesHashed.Load(),
		FilesQueued:     n,
		BytesQueued:     b,
		Removals:        removals,
		Retries:         ix.m.retries.Load(),
		Errors:          ix.m.errors.Load(),
		Renames:         ix.m.renames.Load(),
		Unshelved:       ix.m.unshelved.Load(),
		Removed:         ix.m.removed.Load(),
		ScansCompleted:  ix.m.scans.Load(),
		OnDemandHashes:  ix.m.onDemand.Load(),
	}
	p.Uptime = time.Since(ix.startTime)
	if s := p.Uptime.Seconds(); s > 0 {
		p.HashRate = float64(p.BytesHashed) / s
	}
	ix.scans.waitingDirs(func(waiting []string) {
		p.Walk, p.Remaining = ix.scans.walks.progress(p.BytesHashed, p.BytesQueued, waiting)
	})
	p.Idle = watching == 0 && done && scans == 0 && n == 0 && removals == 0
	return p
}

// Idle reports whether the first scan of every root is done and nothing is
// on its way: held back by the watcher, sent and not handed over yet,
// queued, being hashed, waiting to be written or waiting to be removed.
// Changes the watcher has not read yet are not counted: Sync first.
func (ix *Indexer) Idle() bool { return ix.Progress().Idle }

// WorkChanged returns a channel closed at the next change of the indexer's
// work: work taken on (a path queued into an empty pipeline, a walk or a
// removal asked for) or a part's work done. Take it before reading
// Progress, so that no change between the two is missed. Changes the
// watcher holds back are not told: they reach the indexer, and so this
// channel, once they settle.
func (ix *Indexer) WorkChanged() <-chan struct{} { return ix.idle.wait() }

// Working reports whether the indexer has work of its own: paths in the
// pipeline, walks waiting or running, removals waiting. Unlike Idle it
// leaves out the changes the watcher holds back and the first scan's
// state; WorkChanged tells when it may have changed.
func (ix *Indexer) Working() bool {
	n, _ := ix.pipe.pend.stats()
	return n > 0 || ix.scans.pending() > 0 || ix.removals.len() > 0
}

// BulkQueued is how many paths in the pipeline make bulk work.
const BulkQueued = 512

// Bulk reports whether the indexer works in bulk: a walk waits or runs, or
// BulkQueued or more paths are in the pipeline. Background work (the
// audit, deduplication) waits while it does; a trickle of changes, such
// as a log appended to, is not bulk work.
func (ix *Indexer) Bulk() bool {
	if ix.scans.pending() > 0 {
		return true
	}
	n, _ := ix.pipe.pend.stats()
	return n >= BulkQueued
}

// watchRecheck is how often WaitIdle looks again while the watcher holds
// changes: it tells nobody when it lets one go without an event.
const watchRecheck = 50 * time.Millisecond

// WaitIdle blocks until Idle or ctx ends. It wakes when a part of the
// indexer finishes its work, and looks again every watchRecheck only
// while the watcher holds changes.
func (ix *Indexer) WaitIdle(ctx context.Context) error {
	for {
		woken := ix.idle.wait() // before reading, so no change is missed
		p := ix.Progress()
		if p.Idle {
			return nil
		}
		if err := ix.waitChange(ctx, woken, p.Watching > 0); err != nil {
			return err
		}
	}
}

// waitChange waits for woken, for ctx to end, or, when the watcher holds
// changes, for watchRecheck.
func (ix *Indexer) waitChange(ctx context.Context, woken <-chan struct{}, watching bool) error {
	var recheck <-chan time.Time
	if watching {
		t := time.NewTimer(watchRecheck)
		defer t.Stop()
		recheck = t.C
	}
	select {
	case <-woken:
	case <-recheck:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// signal wakes its waiters each time the state it guards may have changed.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next notify.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// notify wakes the waiters, if there are any.
func (s *signal) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// Collector returns a Prometheus collector of the indexer's counters and
// gauges, named annexd_indexer_*.
func (ix *Indexer) Collector() prometheus.Collector { return &collector{ix: ix} }

type collector struct{ ix *Indexer }

type metric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(p *Progress) float64
}

func newDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("annexd_indexer_"+name, help, nil, nil)
}

var metrics = []metric{
	{newDesc("files_seen_total", "Files seen by walks."), prometheus.CounterValue, func(p *Progress) float64 { return float64(p.FilesSeen) }},
	{newDesc("bytes_seen_total", "Bytes of the files seen by walks."), prometheus.CounterValue, func(p *Progress) float64 { return float64(p.BytesSeen) }},
	{newDesc("files_hashed_total", "Files hashed."), prometheus.CounterValue, func(p *Progress) float64 { return float64(p.FilesHashed) }},
	{newDesc("bytes_hashed_total", "Bytes hashed."), prometheus.CounterValue, func(p *Progress) float64 { return float64(p.BytesHashed) }},
	{newDesc("retries_total", "Files retried because they changed while hashed."), prometheus.CounterValue, func(p *Progress) float64 { return float64(p.Retries) }},
	{newDesc("errors_total", "Errors (unreadable files and directories, index errors)."), prometheus.CounterValue, func(p *Progress) float64 { return float64(p.Errors) }},
	{newDesc("renames_total", "Records moved to a renamed path without re-hashing."), prometheus.CounterValue, func(p *Progress) float64 { return float64(p.Renames) }},
	{newDesc("unshelved_total", "Records of a file system back where it was, taken back without re-hashing."), prometheus.CounterValue, func(p *Progress) float64 { return float64(p.Unshelved) }},
	{newDesc("removed_total", "Records dropped because their file is gone."), prometheus.CounterValue, func(p *Progress) float64 { return float64(p.Removed) }},
	{newDesc("scans_total", "Walks completed."), prometheus.CounterValue, func(p *Progress) float64 { return float64(p.ScansCompleted) }},
	{newDesc("on_demand_hashes_total", "Files hashed by lookups."), prometheus.CounterValue, func(p *Progress) float64 { return float64(p.OnDemandHashes) }},
	{newDesc("queue_files", "Paths in the pipeline."), prometheus.GaugeValue, func(p *Progress) float64 { return float64(p.FilesQueued) }},
	{newDesc("queue_bytes", "Bytes of the paths in the pipeline, where known."), prometheus.GaugeValue, func(p *Progress) float64 { return float64(p.BytesQueued) }},
	{newDesc("scans_pending", "Walks waiting or running."), prometheus.GaugeValue, func(p *Progress) float64 { return float64(p.ScansPending) }},
	{newDesc("watching", "Changes the watcher holds back or has not handed over yet."), prometheus.GaugeValue, func(p *Progress) float64 { return float64(p.Watching) }},
	{newDesc("idle", "1 when the initial scan is done and nothing is pending."), prometheus.GaugeValue, func(p *Progress) float64 {
		if p.Idle {
			return 1
		}
		return 0
	}},
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range metrics {
		ch <- m.desc
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	p := c.ix.Progress()
	for _, m := range metrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(&p))
	}
}

// RootScanned reports whether the first scan of root has ended.
func (ix *Indexer) RootScanned(root string) bool {
	_, waiting := ix.scans.initRoots.Load(root)
	return !waiting
}
