package indexer

import (
	"context"
	"errors"
	"hash/maphash"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

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

	emptyIndex bool         // the index held no record when the scan began
	early      earlyFiles   // files its count queued ahead of the walk (expect.go)
	live       walkLive     // what the walk saw and expects (expect.go)
	sized      atomic.Int64 // bytes of the files the walk did not stat, counted as they are opened
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

// scanner runs the requested walks, merging requests for the same
// directory that have not started yet, and sweeps what a walk did not see.
type scanner struct {
	st          *store.Store
	pipe        *pipeline
	paths       *pathRules
	ticks       *ticks
	fsys        *fileSystems
	m           *counters
	log         *slog.Logger
	idle        *signal // told when a walk is asked for, and when the last one ends
	walkWorkers int
	beforeDir   func(ctx context.Context, dir string) error // Watches.WaitWatched
	oneFS       bool                                        // Options.OneFileSystem
	displaced   *displaced                                  // keeps the flagged records a sweep drops

	mu      sync.Mutex
	waiting []string
	queued  map[string]bool
	signal  chan struct{}
	gen     atomic.Uint64 // latest generation handed out
	active  atomic.Int64  // scans running

	initial   chan struct{} // closed when every root was scanned once
	initRoots sync.Map      // root → struct{} until its first full scan ends
	initLeft  atomic.Int64
	// initPartial: a root's first scan ended incomplete.
	initPartial atomic.Bool

	unreadMu     sync.Mutex
	unreadLogged map[string]struct{} // unreadable paths already logged

	walks *walks // the running walks and the roots' last totals (expect.go)
}

// newScanner readies s, built with its parts, to walk roots.
func newScanner(s *scanner, roots []string) *scanner {
	s.queued = make(map[string]bool)
	s.signal = make(chan struct{}, 1)
	s.initial = make(chan struct{})
	s.unreadLogged = make(map[string]struct{})
	for _, r := range roots {
		s.initRoots.Store(r, struct{}{})
	}
	s.initLeft.Store(int64(len(roots)))
	if len(roots) == 0 {
		close(s.initial)
	}
	return s
}

// generation is the generation new records get: the latest one handed out,
// so a record written while a scan runs counts as seen by it.
func (s *scanner) generation() uint64 { return s.gen.Load() }

func (s *scanner) request(dir string) {
	s.mu.Lock()
	if !s.queued[dir] {
		s.queued[dir] = true
		s.waiting = append(s.waiting, dir)
	}
	s.mu.Unlock()
	s.idle.notify()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// waitingDirs calls fn with the directories asked to scan and not taken
// yet, under the lock that moves them on (take), so that fn sees each
// one in the list or in walks.coming, never in neither.
func (s *scanner) waitingDirs(fn func(waiting []string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.waiting)
}

// hasWaiting reports whether scans are asked for and not taken yet.
func (s *scanner) hasWaiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting) > 0
}

// pending reports how many walks are waiting or running.
func (s *scanner) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting) + int(s.active.Load())
}

func (s *scanner) take() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) == 0 {
		return "", false
	}
	dir := s.waiting[0]
	s.waiting = s.waiting[1:]
	delete(s.queued, dir)
	s.active.Add(1)
	s.walks.come(dir) // under s.mu: never in neither list (progress)
	return dir, true
}

// ended notes that a walk is over.
func (s *scanner) ended() {
	if s.active.Add(-1) == 0 {
		s.idle.notify()
	}
}

func (s *scanner) run(ctx context.Context) error {
	st, err := s.st.Stats()
	if err != nil {
		return err
	}
	s.gen.Store(st.Generation)
	s.walks.load(s.st)
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
			s.walks.begun(dir)
			s.ended()
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.scan(ctx, dir)
			s.ended()
		}()
	}
}

// scan walks dir, queues every file whose record is not settled, marks
// the others, waits until all of them settled and sweeps the records the
// walk did not see — only when nothing went wrong.
func (s *scanner) scan(ctx context.Context, dir string) {
	gen, err := s.newGeneration(ctx)
	if err != nil {
		s.walks.begun(dir)
		s.log.Error("cannot start scan", "dir", dir, "err", err)
		return
	}
	sc := &scan{dir: dir, gen: gen, seen: newSeenSet(), unread: make(map[string]bool), emptyIndex: s.indexEmpty()}
	if fi, err := fsstat.Lstat(dir); err == nil {
		s.ticks.learn(fi.Dev, dir)
	}
	start := time.Now()
	stopCount := s.expect(ctx, sc)
	defer func() { s.walks.over(sc, s.hasWaiting()) }()
	s.logStart(sc)
	w := s.walk(ctx, sc)
	stopCount()
	s.walks.walked(sc)
	waitGroup(ctx, &sc.wg)
	if ctx.Err() != nil {
		return
	}
	w.bytes += sc.sized.Load()
	if !s.sweepable(sc, w) {
		return
	}
	n := 0
	if !s.allRecordsSeen(dir, w.found) {
		n, err = s.sweep(ctx, sc)
		if err != nil {
			s.m.errors.Add(1)
			s.log.Error("cannot drop records of vanished files", "dir", dir, "err", err)
		}
	}
	s.m.removed.Add(int64(n))
	s.m.scans.Add(1)
	s.log.Info("scan done", "dir", dir, "files", w.files, "bytes", w.bytes, "dropped", n,
		"took", time.Since(start).Round(time.Millisecond))
	if len(sc.unread) == 0 {
		s.record(dir, w.files, w.bytes)
	}
	s.scanEnded(dir, true)
}

// walked is what a walk found.
type walked struct {
	files, bytes int64
	found        int64 // files that had a record
	err          error
}

// walk walks sc.dir and hands its files to the checkers.
func (s *scanner) walk(ctx context.Context, sc *scan) walked {
	var w walked
	root := s.paths.roots.IsRoot(sc.dir)
	empty := sc.emptyIndex
	ck := s.startCheckers(ctx, sc, empty)
	batch := ck.newBatch()
	flush := func() {
		s.m.filesSeen.Add(int64(len(batch)))
		ck.send(batch)
		batch = ck.newBatch()
	}
	w.err = walker.Walk(ctx, sc.dir, walker.Options{
		Workers:       s.walkWorkers,
		Ignore:        s.paths.ignoreFor(sc.dir),
		BeforeDir:     s.beforeDir,
		OneFileSystem: s.oneFS,
		// Into an empty index every file is hashed: its checker opens it
		// and takes its identity from the descriptor, saving a stat.
		NoStat: empty,
		OnError: func(path string, err error) {
			sc.noteUnread(path)
			s.m.errors.Add(1)
			s.logUnreadable(path, err)
		},
	}, func(e walker.Entry) error {
		if s.paths.excluded(e.Path) || (!root && s.paths.ignored(e.Path, false)) {
			return nil
		}
		w.files++
		w.bytes += e.Info.Size
		s.m.bytesSeen.Add(e.Info.Size)
		sc.live.files.Add(1)
		sc.live.bytes.Add(e.Info.Size)
		sc.early.met(e.Path, &sc.live)
		batch = append(batch, seenEntry{Entry: e, remembered: sc.seen.add(e.Path)})
		if len(batch) == checkBatch {
			flush()
		}
		return nil
	})
	if len(batch) > 0 {
		flush()
	}
	w.found = ck.wait()
	return w
}

// sweepable reports whether the walk went well enough for a sweep; when it
// did not, it says why and ends the scan.
func (s *scanner) sweepable(sc *scan, w walked) bool {
	dir := sc.dir
	switch {
	case errors.Is(w.err, walker.ErrRoot):
		// The directory is gone or unreadable: the watcher reports what it is.
		s.log.Debug("scan target unreadable", "dir", dir, "err", w.err)
		s.scanEnded(dir, false)
		return false
	case w.err != nil || sc.errs.Load() > 0 || sc.tooMany:
		s.log.Warn("scan had errors; records of unseen files kept", "dir", dir,
			"unreadable", len(sc.unread), "err", w.err)
	case s.paths.roots.IsRoot(dir) && w.files == 0 && s.hasRecords(dir):
		// An unmounted disk leaves an empty mount point: keep its records
		// rather than hash it all again when it comes back.
		s.log.Warn("root is empty but the index has records under it; keeping them", "root", dir)
	default:
		if len(sc.unread) > 0 {
			s.log.Warn("scan could not read some paths; their records are kept", "dir", dir,
				"unreadable", len(sc.unread))
		}
		return true
	}
	s.scanEnded(dir, true)
	return false
}

// sweep drops the records under the scanned directory that the scan did
// not see: older generation, not in its seen set, and not under a path it
// could not read.
func (s *scanner) sweep(ctx context.Context, sc *scan) (int, error) {
	dirfd, err := unix.Open(sc.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	switch {
	case isGone(err):
		return 0, nil // gone since its walk: its removal drops the records
	case err != nil:
		return 0, &fs.PathError{Op: "open", Path: sc.dir, Err: err}
	}
	defer unix.Close(dirfd)
	at := places{}
	return s.st.SweepFenced(ctx, []byte(sc.dir), sc.gen, func(p []byte, r *store.Record) bool {
		path := string(p)
		kept := sc.seen.contains(path) || sc.underUnread(path) || s.stillThere(dirfd, sc.dir, path) ||
			s.absentFrom(at, path, r.Dev)
		if !kept {
			s.displaced.keepGone(path, r)
		}
		return kept
	})
}

// absentFrom reports whether the record of file system dev at path, which
// the walk did not see, is of a file system not mounted at its place now:
// it stays (filesystems.go).
func (s *scanner) absentFrom(at places, path string, dev uint64) bool {
	if !fsstat.Stable(dev) {
		return false
	}
	here, ok := at.of(path)
	return !ok || s.fsys.absent(dev, here)
}

// stillThere reports whether a record the walk did not see belongs to a
// regular file that is there now, reached without a symlink from the
// walked directory dir (open as dirfd), and that the walk would have
// delivered: one that came back after the walk passed (a directory renamed
// in from outside the roots, say). Its record stays; the sweep's fence
// spares it if it comes back only after this look.
func (s *scanner) stillThere(dirfd int, dir, path string) bool {
	if s.paths.excluded(path) || s.paths.ignored(path, false) {
		return false // the walk skips it, and the sweep drops its record
	}
	fi, err := fsstat.LstatBeneath(dirfd, dir, strings.TrimPrefix(path[len(dir):], "/"))
	switch {
	case err == nil:
		return fi.IsRegular()
	case isGone(err), errors.Is(err, unix.ELOOP): // ELOOP: reached only through a symlink
		return false
	}
	return true // it cannot be told: keep the record
}

// allRecordsSeen reports that a walk of the only root found a record for
// as many paths as the index holds, so no record can be unseen and the sweep
// has nothing to do.
func (s *scanner) allRecordsSeen(dir string, found int64) bool {
	if roots := s.paths.roots.Paths(); len(roots) != 1 || dir != roots[0] {
		return false
	}
	st, err := s.st.Stats()
	return err == nil && st.Files == found
}

// newGeneration allocates the generation of a new scan.
func (s *scanner) newGeneration(ctx context.Context) (uint64, error) {
	g, err := s.st.NextGeneration(ctx)
	if err != nil {
		return 0, err
	}
	for {
		cur := s.gen.Load()
		if g <= cur || s.gen.CompareAndSwap(cur, g) {
			return g, nil
		}
	}
}

// indexEmpty reports whether the index holds no record at all.
func (s *scanner) indexEmpty() bool {
	st, err := s.st.Stats()
	return err == nil && st.Files == 0
}

// hasRecords reports whether the index holds a record at or under dir, or
// cannot tell.
func (s *scanner) hasRecords(dir string) bool {
	found, err := recordsAt(context.Background(), s.st, dir, false)
	return err != nil || found
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
	free  sync.Pool // *[]seenEntry: batches checked, to fill again
	wg    sync.WaitGroup
	found atomic.Int64 // files that had a record
}

func (s *scanner) startCheckers(ctx context.Context, sc *scan, emptyIndex bool) *checkers {
	ck := &checkers{in: make(chan []seenEntry, 4)}
	for range 2 {
		ck.wg.Add(1)
		go func() {
			defer ck.wg.Done()
			var (
				arena []byte // the batch's paths, one after another
				paths [][]byte
				found []store.Found
			)
			for batch := range ck.in {
				for _, e := range batch {
					s.st.Saw(e.Path) // before the read: a fenced drop or sweep must spare what is kept
				}
				arena, paths = batchPaths(batch, arena, paths)
				var err error
				found, err = s.st.GetMany(paths, found[:0])
				for i, e := range batch {
					if s.checkWalked(ctx, sc, e, s.foundAt(found, i, err, e.Path), emptyIndex) {
						ck.found.Add(1)
					}
				}
				ck.reuse(batch)
			}
		}()
	}
	return ck
}

// batchPaths copies the paths of batch into arena, reused from batch to
// batch, and slices them from it: no allocation a file.
func batchPaths(batch []seenEntry, arena []byte, paths [][]byte) ([]byte, [][]byte) {
	arena = arena[:0]
	for _, e := range batch {
		arena = append(arena, e.Path...)
	}
	paths = paths[:0]
	off := 0
	for _, e := range batch {
		n := len(e.Path)
		paths = append(paths, arena[off:off+n:off+n])
		off += n
	}
	return arena, paths
}

// foundAt is the answer of a batch look-up for its i-th path, or of a look-up
// of path alone when the batch failed; nil when the index cannot tell.
func (s *scanner) foundAt(found []store.Found, i int, batchErr error, path string) *store.Found {
	if batchErr == nil && i < len(found) {
		return &found[i]
	}
	rec, ok, err := s.st.Get([]byte(path))
	if err != nil {
		return nil // the worker looks again
	}
	return &store.Found{Record: rec, OK: ok}
}

func (ck *checkers) send(b []seenEntry) { ck.in <- b }

// newBatch returns an empty batch, a checked one when there is one.
func (ck *checkers) newBatch() []seenEntry {
	if b, ok := ck.free.Get().(*[]seenEntry); ok {
		return (*b)[:0]
	}
	return make([]seenEntry, 0, checkBatch)
}

// reuse keeps a checked batch for newBatch.
func (ck *checkers) reuse(b []seenEntry) {
	clear(b) // drop the paths
	b = b[:0]
	ck.free.Put(&b)
}

// wait ends the checkers and returns how many files had a record.
func (ck *checkers) wait() int64 {
	close(ck.in)
	ck.wg.Wait()
	return ck.found.Load()
}

// checkWalked leaves a walked file whose record f (nil: unknown) is settled
// alone, marking it when the seen set is full, and queues the others. It
// reports whether the file had a record.
func (s *scanner) checkWalked(ctx context.Context, sc *scan, e seenEntry, f *store.Found, emptyIndex bool) bool {
	if f != nil && f.OK && s.ticks.settled(&f.Record, e.Info) && !s.pipe.pend.has(e.Path) {
		if !e.remembered && f.Record.Generation < sc.gen {
			s.pipe.markSeen(e.Path, sc)
		}
		sc.live.settled.Add(e.Info.Size)
		return true
	}
	// The batch's look-up may predate the record of a file the count
	// queued ahead of the walk, written since: its check looks again.
	absent := f != nil && !f.OK && !sc.early.has(e.Path)
	j := job{path: e.Path, noAdopt: emptyIndex, absent: absent}
	if e.Stated {
		info := e.Info
		j.info = &info
	} else {
		j.open = true // walked without a stat (walker.Options.NoStat): the checker opens it
	}
	sc.live.hashBytes.Add(e.Info.Size)
	s.pipe.enqueue(ctx, j, sc, e.Info.Size)
	return f != nil && f.OK
}

// scanEnded notes the end of a root's first scan.
func (s *scanner) scanEnded(dir string, complete bool) {
	if _, ok := s.initRoots.LoadAndDelete(dir); ok {
		if !complete {
			s.initPartial.Store(true)
			s.log.Warn("root could not be scanned", "root", dir)
		}
		if s.initLeft.Add(-1) == 0 {
			close(s.initial)
			s.log.Info("initial scan done")
			s.idle.notify()
		}
	}
}

// initialDone reports whether the first scan of every root has ended.
func (s *scanner) initialDone() bool {
	select {
	case <-s.initial:
		return true
	default:
		return false
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
func (s *scanner) logUnreadable(path string, err error) {
	s.unreadMu.Lock()
	_, again := s.unreadLogged[path]
	if !again && len(s.unreadLogged) < maxLoggedUnreadable {
		s.unreadLogged[path] = struct{}{}
	}
	s.unreadMu.Unlock()
	if again {
		s.log.Debug("cannot read during scan", "path", path, "err", err)
		return
	}
	s.log.Warn("cannot read during scan; its records are kept", "path", path, "err", err)
}
