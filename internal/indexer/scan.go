package indexer

import (
	"context"
	"errors"
	"hash/maphash"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
	"github.com/annexd/annexd/walker"
)

// scan is one walk of a directory with its generation.
type scan struct {
	dir  string
	gen  uint64
	wg   sync.WaitGroup // paths queued or marks submitted, not yet settled
	errs atomic.Int64   // failed marks: no sweep at all when > 0
	seen seenSet        // paths the walk delivered (touched only by its callback)

	mu      sync.Mutex
	unread  map[string]bool // paths the walk could not read: their subtrees are not swept
	tooMany bool            // more than maxUnread: nothing is swept
}

// maxUnread bounds the unreadable paths a scan remembers.
const maxUnread = 1024

// noteUnread remembers a path the walk could not read.
func (sc *scan) noteUnread(p string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if len(sc.unread) >= maxUnread {
		sc.tooMany = true
		return
	}
	sc.unread[p] = true
}

// underUnread reports whether p is, or is under, a path the walk could not
// read.
func (sc *scan) underUnread(p string) bool {
	if len(sc.unread) == 0 {
		return false
	}
	for a := p; ; a = filepath.Dir(a) {
		if sc.unread[a] {
			return true
		}
		if a == sc.dir || a == "/" || a == "." {
			return false
		}
	}
}

// maxSeen bounds the seen set of one scan (8 bytes a path); beyond it, the
// records of unchanged files are marked with the scan's generation in the
// store instead, which costs a write each.
const maxSeen = 4 << 20

// seenSet remembers the paths a walk delivered as 64-bit hashes, so that
// unchanged files need no write at all: after the walk, a record with an
// older generation whose path is not in the set belongs to a file that is
// gone. A hash collision can only keep a stale record (never drop a live
// one), and the seed differs per scan.
type seenSet struct {
	seed   maphash.Seed
	hashes []uint64
	sorted bool
}

func newSeenSet() seenSet { return seenSet{seed: maphash.MakeSeed()} }

// add remembers path, or reports false when the set is full.
func (s *seenSet) add(path string) bool {
	if len(s.hashes) >= maxSeen {
		return false
	}
	s.hashes = append(s.hashes, maphash.String(s.seed, path))
	return true
}

func (s *seenSet) contains(path string) bool {
	if !s.sorted {
		slices.Sort(s.hashes)
		s.sorted = true
	}
	_, ok := slices.BinarySearch(s.hashes, maphash.String(s.seed, path))
	return ok
}

// maxConcurrentScans: a long walk of a root must not hold back the walk of a
// directory that was just created.
const maxConcurrentScans = 2

// scheduler runs the requested walks, merging requests for the same
// directory that have not started yet.
type scheduler struct {
	ix      *Indexer
	mu      sync.Mutex
	waiting []string
	queued  map[string]bool
	running map[string]int
	signal  chan struct{}
	gen     atomic.Uint64 // latest generation handed out
	active  atomic.Int64  // scans running
}

func newScheduler(ix *Indexer) *scheduler {
	return &scheduler{
		ix:      ix,
		queued:  make(map[string]bool),
		running: make(map[string]int),
		signal:  make(chan struct{}, 1),
	}
}

// generation is the generation new records get: the latest one handed out,
// so a record written while a scan runs counts as seen by it.
func (s *scheduler) generation() uint64 { return s.gen.Load() }

func (s *scheduler) request(dir string) {
	s.mu.Lock()
	if !s.queued[dir] {
		s.queued[dir] = true
		s.waiting = append(s.waiting, dir)
	}
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// pending reports how many walks are waiting or running.
func (s *scheduler) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting) + int(s.active.Load())
}

func (s *scheduler) take() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) == 0 {
		return "", false
	}
	dir := s.waiting[0]
	s.waiting = s.waiting[1:]
	delete(s.queued, dir)
	s.active.Add(1)
	return dir, true
}

func (s *scheduler) run(ctx context.Context) error {
	gen, err := s.ix.loadGeneration()
	if err != nil {
		return err
	}
	s.gen.Store(gen)
	sem := make(chan struct{}, maxConcurrentScans)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		dir, ok := s.take()
		if !ok {
			select {
			case <-s.signal:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			s.active.Add(-1)
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.ix.scanDir(ctx, dir)
			s.active.Add(-1)
		}()
	}
}

// scanDir walks dir, queues every file whose record is not settled, marks
// the others, waits until all of them settled and sweeps the records the
// walk did not see — only when nothing went wrong.
func (ix *Indexer) scanDir(ctx context.Context, dir string) {
	gen, err := ix.newGeneration()
	if err != nil {
		ix.log.Error("cannot start scan", "dir", dir, "err", err)
		return
	}
	sc := &scan{dir: dir, gen: gen, seen: newSeenSet(), unread: make(map[string]bool)}
	if fi, err := fsstat.Lstat(dir); err == nil {
		ix.gran.Learn(fi.Dev, dir)
	}
	start := time.Now()
	var seen, bytes int64
	root := ix.isRoot(dir)
	ck := ix.startCheckers(ctx, sc, ix.indexEmpty())
	batch := make([]seenEntry, 0, checkBatch)
	walkErr := walker.Walk(ctx, dir, walker.Options{
		Workers: ix.opt.WalkWorkers,
		Ignore:  ix.ignoreFor(dir),
		OnError: func(path string, err error) {
			sc.noteUnread(path)
			ix.m.errors.Add(1)
			ix.logUnreadable(path, err)
		},
	}, func(e walker.Entry) error {
		if ix.excluded(e.Path) || (!root && ix.ignored(e.Path, false)) {
			return nil
		}
		seen++
		bytes += e.Info.Size
		ix.m.bytesSeen.Add(e.Info.Size)
		batch = append(batch, seenEntry{Entry: e, remembered: sc.seen.add(e.Path)})
		if len(batch) == checkBatch {
			ix.m.filesSeen.Add(int64(len(batch)))
			ck.send(batch)
			batch = make([]seenEntry, 0, checkBatch)
		}
		return nil
	})
	if len(batch) > 0 {
		ix.m.filesSeen.Add(int64(len(batch)))
		ck.send(batch)
	}
	found := ck.wait()
	waitGroup(ctx, &sc.wg)
	switch {
	case ctx.Err() != nil:
		return
	case errors.Is(walkErr, walker.ErrRoot):
		// The directory is gone or unreadable: the watcher reports what it is.
		ix.log.Debug("scan target unreadable", "dir", dir, "err", walkErr)
		ix.scanEnded(dir, false)
		return
	case walkErr != nil || sc.errs.Load() > 0 || sc.tooMany:
		ix.log.Warn("scan had errors; records of unseen files kept", "dir", dir,
			"unreadable", len(sc.unread), "err", walkErr)
		ix.scanEnded(dir, true)
		return
	case root && seen == 0 && ix.hasRecords(dir):
		// An unmounted disk leaves an empty mount point: keep its records
		// rather than hash it all again when it comes back.
		ix.log.Warn("root is empty but the index has records under it; keeping them", "root", dir)
		ix.scanEnded(dir, true)
		return
	}
	if len(sc.unread) > 0 {
		ix.log.Warn("scan could not read some paths; their records are kept", "dir", dir,
			"unreadable", len(sc.unread))
	}
	n := 0
	if !ix.allRecordsSeen(dir, found) {
		n, err = ix.sweep(ctx, sc)
		if err != nil {
			ix.m.errors.Add(1)
			ix.log.Error("cannot drop records of vanished files", "dir", dir, "err", err)
		}
	}
	ix.m.removed.Add(int64(n))
	ix.m.scans.Add(1)
	ix.log.Info("scan done", "dir", dir, "files", seen, "bytes", bytes, "dropped", n,
		"took", time.Since(start).Round(time.Millisecond))
	ix.scanEnded(dir, true)
}

// allRecordsSeen reports that a walk of the only root found a record for
// as many paths as the index holds, so no record can be unseen and the sweep
// has nothing to do.
func (ix *Indexer) allRecordsSeen(dir string, found int64) bool {
	if len(ix.opt.Roots) != 1 || dir != ix.opt.Roots[0] {
		return false
	}
	s, err := ix.st.Stats()
	return err == nil && s.Files == found
}

// checkBatch is how many walked files go to a checker at once.
const checkBatch = 256

// seenEntry is a walked file and whether the scan's seen set holds it.
type seenEntry struct {
	walker.Entry
	remembered bool
}

// checkers compare walked files with their records on two goroutines, so
// that the index look-ups keep pace with the walk's parallel directory
// reads.
type checkers struct {
	in    chan []seenEntry
	wg    sync.WaitGroup
	found atomic.Int64 // files that had a record
}

func (ix *Indexer) startCheckers(ctx context.Context, sc *scan, emptyIndex bool) *checkers {
	ck := &checkers{in: make(chan []seenEntry, 4)}
	for range 2 {
		ck.wg.Add(1)
		go func() {
			defer ck.wg.Done()
			var (
				paths [][]byte
				found []store.Found
			)
			for batch := range ck.in {
				paths = paths[:0]
				for _, e := range batch {
					paths = append(paths, []byte(e.Path))
				}
				var batchErr error
				found, batchErr = ix.st.GetMany(paths, found[:0])
				for i, e := range batch {
					var f store.Found
					known := true
					if batchErr == nil && i < len(found) {
						f = found[i]
					} else if rec, ok, err := ix.get(e.Path); err == nil {
						f = store.Found{Record: rec, OK: ok}
					} else {
						known = false // the worker looks again
					}
					if ix.checkWalked(ctx, sc, e, f, known, emptyIndex) {
						ck.found.Add(1)
					}
				}
			}
		}()
	}
	return ck
}

func (ck *checkers) send(b []seenEntry) { ck.in <- b }

// wait ends the checkers and returns how many files had a record.
func (ck *checkers) wait() int64 {
	close(ck.in)
	ck.wg.Wait()
	return ck.found.Load()
}

// checkWalked leaves a walked file whose record f is settled alone (marking
// it when the seen set is full) and queues the others; known says f is a
// real answer of the index. It reports whether the file had a record.
func (ix *Indexer) checkWalked(ctx context.Context, sc *scan, e seenEntry, f store.Found, known, emptyIndex bool) bool {
	if known && f.OK && ix.settled(&f.Record, e.Info) && !ix.pend.has(e.Path) {
		if !e.remembered && f.Record.Generation < sc.gen {
			ix.markSeen(e.Path, sc)
		}
		return true
	}
	info := e.Info
	ix.enqueueJob(ctx, job{path: e.Path, info: &info, noAdopt: emptyIndex, absent: known && !f.OK}, sc, e.Info.Size)
	return f.OK
}

// scanEnded notes the end of a root's first scan.
func (ix *Indexer) scanEnded(dir string, complete bool) {
	if _, ok := ix.initRoots.LoadAndDelete(dir); ok {
		if !complete {
			ix.log.Warn("root could not be scanned", "root", dir)
		}
		if ix.initLeft.Add(-1) == 0 {
			close(ix.initial)
			ix.log.Info("initial scan done")
		}
	}
}

// waitGroup waits for wg or for ctx to end.
func waitGroup(ctx context.Context, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// maxLoggedUnreadable bounds the paths remembered as already logged.
const maxLoggedUnreadable = 10000

// logUnreadable logs a path a walk could not read as a warning the first
// time, and at debug level when later scans meet it again.
func (ix *Indexer) logUnreadable(path string, err error) {
	ix.unreadMu.Lock()
	_, again := ix.unreadLogged[path]
	if !again && len(ix.unreadLogged) < maxLoggedUnreadable {
		ix.unreadLogged[path] = struct{}{}
	}
	ix.unreadMu.Unlock()
	if again {
		ix.log.Debug("cannot read during scan", "path", path, "err", err)
		return
	}
	ix.log.Warn("cannot read during scan; its records are kept", "path", path, "err", err)
}
