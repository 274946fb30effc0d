package audit

// tally counts the files decided since the daemon started, for status and
// the metrics. Guarded by Auditor.mu.
type tally struct {
	totals    [classEnd]int64 // files by class since the start
	bytes     int64           // bytes verified since the start
	transient int64
	// cacheOnly and cacheOnlyBytes count the verifications since the
	// start whose bytes came from the page cache only, by source.
	cacheOnly      [sourceEnd]int64
	cacheOnlyBytes int64
}

// count adds a decided file to the run's and the daemon's totals.
func (t *tally) count(r *run, c Class) {
	r.counts[c]++
	t.totals[c]++
}

// verified adds the size of a file verified, as read from src, to the
// run's and the daemon's bytes.
func (t *tally) verified(r *run, size int64, src Source) {
	r.bytes += size
	t.bytes += size
	if src != FromDevice {
		r.cacheOnly[src]++
		r.cacheOnlyBytes += size
		t.cacheOnly[src]++
		t.cacheOnlyBytes += size
	}
}

// fill puts the counts into s.
func (t *tally) fill(s *Status) {
	s.BytesVerified, s.Transient = t.bytes, t.transient
	s.Totals = map[string]int64{}
	for c := OK; c < classEnd; c++ {
		if t.totals[c] > 0 {
			s.Totals[c.String()] = t.totals[c]
		}
	}
	s.CacheOnly, s.CacheOnlyBytes = cacheOnlyMap(&t.cacheOnly), t.cacheOnlyBytes
}
