// Package deduppart is deduplication as the daemon runs it: the runs
// asked for through the API (api.Deduper), with their plan, progress and
// skips sent as events and their counts kept for the status and the
// metrics; the background mode when [dedup] continuous is on; and the
// loop that keeps the surveys of block sharing complete while the indexer
// rests. Package dedup does the work; this package gives it its
// settings, its gates and the API's types.
package deduppart
