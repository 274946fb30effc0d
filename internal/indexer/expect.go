package indexer

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annexd/annexd/store"
	"github.com/annexd/annexd/walker"
)

// A running walk's progress needs a denominator: what the walk will see in
// all. It is what the last complete scan of the same root saw, kept in the
// store's meta, or else what a counting walk beside it finds, as restic's
// scanner does. Until the count is done the estimate of the time left is
// unknown rather than made up.

// totalsMeta is the store meta name of the roots' last scan totals.
const totalsMeta = "indexer.scan-totals"

// Where a running walk's expected totals come from.
const (
	ExpectPrevious = "previous scan" // the last complete scan of the root
	ExpectCounting = "counting"      // a counting walk still runs: so far a lower bound
	ExpectCount    = "count"         // the counting walk is done
)

// totals are what one complete scan saw.
type totals struct {
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
}

// WalkProgress is the progress of the scans of a period: from when the
// scanner takes on work until it has none left, every scan begun, its
// walk running or done, and the roots still to walk. Several roots walked
// one after the other count as one piece of work: the totals only grow,
// and the share done only goes back when a tree holds more than expected.
type WalkProgress struct {
	Walking int   `json:"walking"` // walks running now; 0 while the walked files settle
	Files   int64 `json:"files"`   // files these walks saw so far
	Bytes   int64 `json:"bytes"`   // their sizes
	// ExpectFiles and ExpectBytes are what the walks are expected to see
	// in all, from ExpectFrom; 0 when a walk has no expectation yet.
	ExpectFiles int64  `json:"expect_files"`
	ExpectBytes int64  `json:"expect_bytes"`
	ExpectFrom  string `json:"expect_from"`
	// DoneBytes counts the bytes the walks saw that are settled: hashed,
	// or found unchanged. It stays below the total while anything is left.
	DoneBytes int64 `json:"done_bytes"`
	hashBytes int64 // of Bytes, queued to be hashed
}

// walkLive is what one scan's walk saw and expects.
type walkLive struct {
	files, bytes atomic.Int64 // seen so far
	hashBytes    atomic.Int64 // of those, queued to be hashed
	settled      atomic.Int64 // of those, hashed or found unchanged
	ahead        atomic.Int64 // bytes queued ahead of the walk that it has not met yet
	expFiles     atomic.Int64
	expBytes     atomic.Int64
	from         atomic.Pointer[string]
}

// walks keeps the running walks, the scans of the period, and the roots'
// last totals.
type walks struct {
	mu      sync.Mutex
	running map[*scan]struct{}
	active  atomic.Int64 // len(running), read without mu
	// period holds the scans of the period not over yet, and ended what
	// those that are over saw (their scans are let go: a root's holds
	// what its walk met); coming the directories taken to scan whose
	// scans have not begun (waiting for a slot).
	period  []*scan
	ended   WalkProgress
	coming  map[string]int
	totals  map[string]totals // root → its last complete scan
	start   time.Time         // when the period began
	hashed0 int64             // bytes hashed when it began
}

// load reads the roots' last totals from the store.
func (ws *walks) load(st *store.Store) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.running = make(map[*scan]struct{})
	ws.coming = make(map[string]int)
	ws.totals = make(map[string]totals)
	if b, ok, err := st.GetMeta(totalsMeta); err == nil && ok {
		_ = json.Unmarshal(b, &ws.totals) // unreadable totals: count instead
	}
}

// expect sets what the walk of sc is expected to see and registers it as
// running. Without totals of an earlier scan of the root, it starts a
// counting walk beside it, which stop ends.
func (s *scanner) expect(ctx context.Context, sc *scan) (stop func()) {
	ws := s.walks
	ws.mu.Lock()
	if len(ws.period) == 0 && ws.ended.ExpectFrom == "" {
		ws.start, ws.hashed0 = time.Now(), s.m.bytesHashed.Load()
	}
	ws.period = append(ws.period, sc)
	ws.uncome(sc.dir)
	ws.running[sc] = struct{}{}
	ws.active.Store(int64(len(ws.running)))
	t, known := ws.totals[sc.dir]
	ws.mu.Unlock()
	if known {
		sc.live.expFiles.Store(t.Files)
		sc.live.expBytes.Store(t.Bytes)
		sc.live.setFrom(ExpectPrevious)
		return func() {}
	}
	sc.live.setFrom(ExpectCounting)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.count(cctx, sc)
	}()
	return func() { cancel(); <-done }
}

// count walks sc.dir on one reader, counting what the scan's own walk will
// find, and queues the first large files it meets ahead of the walk
// (early); it stops early when ctx ends.
func (s *scanner) count(ctx context.Context, sc *scan) {
	root := s.paths.roots.IsRoot(sc.dir)
	early := 0
	err := walker.Walk(ctx, sc.dir, walker.Options{Workers: 1, Ignore: s.paths.ignoreFor(sc.dir), BeforeDir: s.beforeDir, OneFileSystem: s.oneFS}, func(e walker.Entry) error {
		if s.paths.excluded(e.Path) || (!root && s.paths.ignored(e.Path, false)) {
			return nil
		}
		sc.live.expFiles.Add(1)
		sc.live.expBytes.Add(e.Info.Size)
		if e.Info.Size >= earlyMin && early < earlyMax && e.Info.IsRegular() {
			info := e.Info // the count's lstat: the checker counts nothing of it in what the scan saw
			j := job{path: e.Path, info: &info, noAdopt: sc.emptyIndex}
			sc.early.add(e.Path, e.Info.Size, &sc.live) // before its record can be written
			if s.pipe.enqueueFirst(j, e.Info.Size) {
				early++
				s.m.early.Add(1)
			} else {
				sc.early.drop(e.Path, &sc.live) // queued already, by the walk or an event
			}
		}
		return nil
	})
	if err == nil && ctx.Err() == nil {
		sc.live.setFrom(ExpectCount)
	}
}

// A large file hashed last keeps a scan going long after the small files
// are done: its stream is hashed alone, at the rate of one stream, while
// the other lanes and CPUs have nothing to do (on the corpus, 0.5-1 GB of
// its 3 GB went at a half or a third of the lanes' rate; BENCHMARKS.md).
// So the counting walk, which stats every file
// long before the scan's walk reaches it, queues the first earlyMax files
// of earlyMin bytes or more ahead of the walk: their streams then share
// the lanes with the small files from the start. The walk meets them
// later and finds their records settled (or asks for one more check if
// they are still being hashed).
const (
	earlyMin = 16 << 20
	earlyMax = 64
)

// earlyFiles are the files a scan's count queued ahead of its walk, at most
// earlyMax, with their sizes and whether the walk has met them.
type earlyFiles struct {
	n     atomic.Int32 // len(files), read without mu
	mu    sync.Mutex
	files map[string]*earlyFile
}

type earlyFile struct {
	size int64
	met  bool
}

// add notes path, of size bytes, queued ahead of the walk whose progress l
// counts it in the bytes queued ahead.
func (f *earlyFiles) add(path string, size int64, l *walkLive) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.files == nil {
		f.files = make(map[string]*earlyFile)
	}
	if _, ok := f.files[path]; ok {
		return
	}
	f.files[path] = &earlyFile{size: size}
	f.n.Add(1)
	l.ahead.Add(size)
}

// met notes that the walk met path: if it was queued ahead, its bytes no
// longer count as ahead of the walk.
func (f *earlyFiles) met(path string, l *walkLive) {
	if f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.files[path]; ok && !e.met {
		e.met = true
		l.ahead.Add(-e.size)
	}
}

// drop forgets path, which was not queued ahead after all.
func (f *earlyFiles) drop(path string, l *walkLive) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.files[path]; ok {
		delete(f.files, path)
		f.n.Add(-1)
		if !e.met {
			l.ahead.Add(-e.size)
		}
	}
}

// has reports whether path was queued ahead of the walk.
func (f *earlyFiles) has(path string) bool {
	if f.n.Load() == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.files[path]
	return ok
}

// walked ends sc's walk. Its progress stays in the period's, with the
// files it met as the files it was expected to meet. Its bytes stay as
// expected: a first scan learns a file's size only once it opens it, so
// the bytes are known once its count was done, and are a lower bound
// (ExpectCounting) when the walk ended first.
func (ws *walks) walked(sc *scan) {
	ws.mu.Lock()
	delete(ws.running, sc)
	ws.active.Store(int64(len(ws.running)))
	ws.mu.Unlock()
	sc.live.expFiles.Store(sc.live.files.Load())
}

// come notes dir taken to scan, its scan not begun yet.
func (ws *walks) come(dir string) {
	ws.mu.Lock()
	ws.coming[dir]++
	ws.mu.Unlock()
}

// begun notes that the scan of dir will not begin after all.
func (ws *walks) begun(dir string) {
	ws.mu.Lock()
	ws.uncome(dir)
	ws.mu.Unlock()
}

// uncome notes that the scan of dir began, or will not. Called with
// ws.mu held.
func (ws *walks) uncome(dir string) {
	if ws.coming[dir]--; ws.coming[dir] <= 0 {
		delete(ws.coming, dir)
	}
}

// over notes that sc is over, settled or stopped: what it saw moves to
// ended. The period ends with its last scan, unless more are taken or
// asked for (more): the next scan begins a new one.
func (ws *walks) over(sc *scan, more bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for i, p := range ws.period {
		if p == sc {
			ws.period = append(ws.period[:i], ws.period[i+1:]...)
			ws.ended.add(&sc.live)
			break
		}
	}
	if len(ws.period) == 0 && len(ws.coming) == 0 && !more {
		ws.ended = WalkProgress{}
	}
}

// add counts what the walk of l saw in w.
func (w *WalkProgress) add(l *walkLive) {
	w.DoneBytes += l.settled.Load()
	w.Files += l.files.Load()
	w.Bytes += l.bytes.Load()
	w.hashBytes += l.hashBytes.Load()
	w.ExpectFiles += max(l.expFiles.Load(), l.files.Load())
	w.ExpectBytes += max(l.expBytes.Load(), l.bytes.Load())
	w.least(l.expectFrom())
}

// least makes from w's ExpectFrom when it is less certain.
func (w *WalkProgress) least(from string) {
	if w.ExpectFrom == "" || from == ExpectCounting || (from == ExpectPrevious && w.ExpectFrom == ExpectCount) {
		w.ExpectFrom = from
	}
}

// walking reports whether a scan's walk runs now.
func (ws *walks) walking() bool { return ws.active.Load() > 0 }

// record keeps what a complete scan of a root saw, for the next one.
func (s *scanner) record(dir string, files, bytes int64) {
	if !s.paths.roots.IsRoot(dir) {
		return
	}
	ws := s.walks
	ws.mu.Lock()
	ws.totals[dir] = totals{Files: files, Bytes: bytes}
	b, err := json.Marshal(ws.totals)
	ws.mu.Unlock()
	if err == nil {
		s.st.Submit(store.Change{Op: store.OpPutMeta, Path: []byte(totalsMeta), Value: b}, nil)
	}
}

func (l *walkLive) setFrom(from string) { l.from.Store(&from) }

func (l *walkLive) expectFrom() string {
	if p := l.from.Load(); p != nil {
		return *p
	}
	return ""
}

// Before an estimate of the time left is made, the period must have run
// minEstimateTime and settled minEstimateShare of what it expects: the
// rate of the first moments, while the queue fills, says little.
const (
	minEstimateTime  = 3 * time.Second
	minEstimateShare = 0.02
)

// progress sums the scans of the period and the roots still to come.
// queued is what the pipeline holds in bytes, hashed the bytes hashed
// since start. It returns nil when the period holds no scan, and the time
// left: 0 when it cannot be told yet.
func (ws *walks) progress(hashed, queued int64, waiting []string) (*WalkProgress, time.Duration) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	elapsed := time.Since(ws.start).Seconds()
	rate := 0.0 // bytes hashed per second since the period began
	if !ws.start.IsZero() && elapsed > 0 {
		rate = float64(hashed-ws.hashed0) / elapsed
	}
	if len(ws.period) == 0 && len(ws.coming) == 0 && len(waiting) == 0 && ws.ended.ExpectFrom == "" {
		if rate <= 0 {
			return nil, 0
		}
		return nil, seconds(float64(queued) / rate) // changes queued by events: at the last period's rate
	}
	w := ws.ended // the scans over, then those that go on, the least certain expectation of all
	w.Walking = len(ws.running)
	var ahead int64
	for _, sc := range ws.period {
		w.add(&sc.live)
		ahead += sc.live.ahead.Load()
	}
	// The scans still to begin: a root's last totals, else nothing known
	// yet (a lower bound, as while a count runs).
	for _, dir := range ws.comingDirs(waiting) {
		if t, ok := ws.totals[dir]; ok {
			w.ExpectFiles += t.Files
			w.ExpectBytes += t.Bytes
			w.least(ExpectPrevious)
		} else {
			w.least(ExpectCounting)
		}
	}
	if w.ExpectFrom == ExpectCounting || rate <= 0 || elapsed < minEstimateTime.Seconds() ||
		float64(w.DoneBytes) < minEstimateShare*float64(max(w.ExpectBytes, w.Bytes)) {
		return &w, 0
	}
	// The part not walked yet needs hashing in the share the walked part
	// did: all of it in a first scan, little in a rescan.
	share := 1.0
	if w.Bytes > 0 {
		share = float64(w.hashBytes) / float64(w.Bytes)
	}
	// Files queued ahead of the walk are in queued (or done): not in what
	// the walk has still to meet.
	hashLeft := (float64(queued) + float64(max(w.ExpectBytes-w.Bytes-ahead, 0))*share) / rate
	walkLeft := 0.0
	if w.Files > 0 {
		walkLeft = float64(max(w.ExpectFiles-w.Files, 0)) / (float64(w.Files) / elapsed)
	}
	return &w, seconds(max(hashLeft, walkLeft))
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// comingDirs lists the directories of the scans still to begin: taken and
// waiting for a slot, or asked for (waiting). Called with ws.mu held.
func (ws *walks) comingDirs(waiting []string) []string {
	out := make([]string, 0, len(ws.coming)+len(waiting))
	for dir, n := range ws.coming {
		for range n {
			out = append(out, dir)
		}
	}
	return append(out, waiting...)
}

// logStart logs the start of a root's scan with what it expects to see.
func (s *scanner) logStart(sc *scan) {
	if !s.paths.roots.IsRoot(sc.dir) {
		return
	}
	s.log.Info("scan started", "dir", sc.dir, "expect_files", sc.live.expFiles.Load(),
		"expect_bytes", sc.live.expBytes.Load(), "expect_from", sc.live.expectFrom())
}
