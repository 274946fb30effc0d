package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterr "go.etcd.io/bbolt/errors"

	"github.com/annexd/annexd/store/codec"
	"github.com/annexd/annexd/store/internal/indexfile"
	"github.com/annexd/annexd/store/internal/migrate"
	"github.com/annexd/annexd/store/internal/pagecheck"
)

// pageSize is the bbolt page size of a new index (an existing one keeps
// its own). Each commit writes every dirty page with a pwrite of its own,
// and a first scan dirties pages mostly by appending: against 4 KiB, pages
// of 16 KiB cut the store's CPU time of a first scan by 14-22 % on the
// corpus and 9 % at 10^5 files (the same at 10^6, where the merges'
// random inserts dominate), with a quarter as many system calls and fewer
// levels of branch pages to rewrite; lookups cost the same (BENCHMARKS.md).
const pageSize = 16 << 10

// formatID marks a bbolt file as an annexd index.
const formatID = "annexd-index"

// SchemaVersion is the schema this package writes.
const SchemaVersion = 8

// Options tune Open. The zero value is what the daemon uses.
type Options struct {
	// ReadOnly opens with a shared lock and refuses writes (check-db).
	ReadOnly bool
	// LockTimeout is how long Open waits for another holder of the index to
	// go away before it returns ErrLocked. Default 1 s.
	LockTimeout time.Duration
	// MaxDelay is the longest a change waits before its group is committed.
	// Default 100 ms.
	MaxDelay time.Duration
	// MaxBatch commits a group early once it has this many changes.
	// Default 4096.
	MaxBatch int
	// MaxGroupNodes shrinks the groups while their commits touch more
	// tree nodes than this (group.go). Default DefaultMaxGroupNodes.
	MaxGroupNodes int
	// MaxIdle commits a group early when no further change arrived for
	// this long, so a lone change does not wait MaxDelay. Default 1 ms.
	// While the caller works in bulk (SetBulk), BulkIdle takes its place.
	MaxIdle time.Duration
	// BulkIdle is MaxIdle while SetBulk's report says bulk work runs.
	// Default 20 ms, at most MaxDelay.
	BulkIdle time.Duration
	// NoSync skips fsync on commit. Only for tests and benchmarks: a crash
	// can then lose acknowledged changes.
	NoSync bool
	// DataWindow is how long before a commit the file of a record it holds
	// may still have had bytes that were not on disk (the hasher's data
	// window). After a run that did not close the index, the records it
	// hashed within this window before its last commit are Suspect.
	// Default DefaultDataWindow.
	DataWindow time.Duration
	// Logger receives the writer's problems. Default: discard.
	Logger *slog.Logger
	// Changes keeps the change log (changes.go) for a hub to follow.
	Changes bool
	// Feed bounds the change feed (feed.go), kept unless Feed.Keep < 0.
	Feed FeedOptions

	noRun bool // Compact's open: no run marker is begun or ended
	// Tests only: the smallest group that defers its digest entries
	// (0: deferMinGroup), the writer's idle time before a merge (0:
	// mergeIdle) and the entries of one merge transaction.
	deferAt   int
	mergeIdle time.Duration
	mergeTx   int           // entries per merge transaction (0: mergeTxEntries)
	mergeAt   int           // pending entries that start a merge (0: mergeDue's rule)
	restAfter time.Duration // the writer's rest (0: restAfter)
}

func (o *Options) fill() {
	if o.LockTimeout <= 0 {
		o.LockTimeout = time.Second
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 100 * time.Millisecond
	}
	if o.MaxIdle <= 0 {
		o.MaxIdle = time.Millisecond
	}
	if o.MaxIdle > o.MaxDelay {
		o.MaxIdle = o.MaxDelay
	}
	if o.BulkIdle <= 0 {
		o.BulkIdle = 20 * time.Millisecond
	}
	o.BulkIdle = min(max(o.BulkIdle, o.MaxIdle), o.MaxDelay)
	if o.MaxBatch <= 0 {
		o.MaxBatch = 4096
	}
	if o.MaxGroupNodes <= 0 {
		o.MaxGroupNodes = DefaultMaxGroupNodes
	}
	o.Feed.fill()
	if o.DataWindow <= 0 {
		o.DataWindow = DefaultDataWindow
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Store is an open index. Reads may be called from any goroutine; writes
// are applied by Run.
type Store struct {
	reader    // the read side: the file, its caches, the queries (read.go)
	changeLog // the change log a hub follows (changes.go)
	runMarker // this run's marker and the last one's (shutdown.go)

	hold         // the writer's wait for space (nospace.go)
	feedLog      // the change feed's read side (feed.go)
	folders      // the queries of whole folders (folders.go)
	bell    bell // rung after a commit that fed the feed (feed.go)

	q       *queue // the changes submitted, not yet taken (queue.go)
	closing chan struct{}
	mu      sync.RWMutex // held shared by Submit, exclusively by Close
	closed  bool
	running sync.Mutex // held by Run
	writer  sync.Mutex // held by Run, by Close while it drains and by a settle that merges
	// txBufs are a write transaction's entries written in key order at
	// its end (txbuf.go), reused by the next; only a transaction, under
	// bbolt's write lock, touches them, and the resting writer (rest).
	txBufs  [3]keyBuf
	batch   []item                      // the writer's group, reused until the writer rests
	bulk    atomic.Pointer[func() bool] // SetBulk's report, nil until set
	group   groupSize                   // the writer's cap on a group (group.go)
	nodes   int64                       // the nodes the writer's last transaction touched
	once    sync.Once
	errOnce error

	fenceSet // raised by callers that drop what they found gone (fence.go)
	// floors holds, by group, when its sharing last changed without a
	// record changing (DropSurvey): a survey made before is refused. The
	// writer's alone (survey.go).
	floors map[string]int64
	// mapTrim unmaps the index from the process above mapBudget; the
	// writer's alone (maptrim.go). Nil for a read-only store.
	mapTrim *mapTrim
}

// DefaultPath returns where the index lives when none is configured:
// $XDG_STATE_HOME/annexd/index.db, else ~/.local/state/annexd/index.db.
func DefaultPath() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "annexd", "index.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("store: no default index path: %w", err)
	}
	return filepath.Join(home, ".local", "state", "annexd", "index.db"), nil
}

// Open opens the index at path, creating it (and its directory) when it does
// not exist and opts.ReadOnly is not set. A file that is not an index, or a
// damaged one, is reported with ErrNotIndex or ErrCorrupt and never written.
// When another process holds the index, Open gives up after
// opts.LockTimeout with ErrLocked.
func Open(path string, opts Options) (*Store, error) {
	opts.fill()
	if err := ensureFile(path, opts); err != nil {
		return nil, err
	}
	db, err := openChecked(path, opts)
	if errors.Is(err, migrate.ErrReplaced) {
		db, err = openChecked(path, opts)
	}
	if err == nil && opts.Changes && !opts.ReadOnly {
		if err = enableChanges(db); err != nil {
			_ = db.Close()
			err = fmt.Errorf("store: open change log of %s: %w", path, err)
		}
	}
	if err == nil && opts.Feed.on() && !opts.ReadOnly {
		if err = enableFeed(db, opts.Feed); err != nil {
			_ = db.Close()
			err = fmt.Errorf("store: open change feed of %s: %w", path, err)
		}
	}
	if err != nil {
		return nil, err
	}
	s := newStore(db, path, opts)
	if err := s.countPending(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if !opts.ReadOnly && !opts.noRun {
		if err := s.beginRun(); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("store: open %s: run marker: %w%s", path, unwritable(err), indexfile.Hint(err))
		}
	}
	return s, nil
}

// newStore puts a store's parts together around db.
func newStore(db *bolt.DB, path string, opts Options) *Store {
	s := &Store{
		reader:  reader{db: db, path: path, opts: opts, log: opts.Logger},
		q:       newQueue(4 * opts.MaxBatch),
		closing: make(chan struct{}),
		group:   newGroupSize(opts.MaxBatch, opts.MaxGroupNodes),
		floors:  map[string]int64{},
	}
	s.changeLog, s.runMarker.reader = changeLog{&s.reader}, &s.reader
	s.feedLog, s.folders = feedLog{reader: &s.reader, bell: &s.bell, closing: s.closing}, folders{&s.reader}
	s.hold.file, s.hold.logger, s.hold.closing = path, s.log, s.closing
	s.hold.queued = s.q.len
	s.deferred = newDeferred(s)
	if !opts.ReadOnly {
		s.mapTrim = newMapTrim(mapBudget)
	}
	return s
}

// Path returns the index file's path.
func (s *Store) Path() string { return s.path }

// ensureFile checks an existing file's header, or creates a new index.
func ensureFile(path string, opts Options) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a regular file", ErrNotIndex, path)
	case err == nil && opts.ReadOnly:
		return checkHeader(path, fi.Size())
	case err == nil:
		if err := checkHeader(path, fi.Size()); err != nil {
			return err
		}
		return checkFreelist(path)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("store: open index: %w", err)
	case opts.ReadOnly:
		return fmt.Errorf("%w at %s", ErrNoIndex, path)
	}
	return create(path, opts)
}

// create writes a fresh index to a temporary file and links it into place,
// so a crash never leaves a half-made index at path.
func create(path string, opts Options) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("store: create index directory: %w%s", unwritable(err), indexfile.Hint(err))
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".new-*")
	if err != nil {
		return fmt.Errorf("store: create index in %s: %w%s", dir, unwritable(err), indexfile.Hint(err))
	}
	name := tmp.Name()
	_ = tmp.Close()
	defer os.Remove(name)
	if err := initIndex(name, opts); err != nil {
		return fmt.Errorf("store: create index %s: %w%s", path, unwritable(err), indexfile.Hint(err))
	}
	if err := os.Link(name, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("store: create index %s: %w%s", path, unwritable(err), indexfile.Hint(err))
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

func initIndex(name string, opts Options) error {
	db, err := bolt.Open(name, 0o600, &bolt.Options{NoSync: opts.NoSync, PageSize: pageSize})
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range codec.AllBuckets {
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		m := tx.Bucket(codec.BucketMeta)
		now := binary.AppendVarint(nil, time.Now().UnixNano())
		for _, kv := range [][2][]byte{
			{codec.MetaFormat, []byte(formatID)},
			{codec.MetaSchema, binary.AppendUvarint(nil, SchemaVersion)},
			{codec.MetaCreated, now},
		} {
			if err := m.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && opts.NoSync {
		err = db.Sync()
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkHeader reads bbolt's file header before bbolt maps the file, so
// that a foreign or truncated file gets a clear error instead of a fault.
func checkHeader(path string, size int64) error {
	if size == 0 {
		return fmt.Errorf("%w: %s is an empty file (remove it and annexd creates a new index)", ErrNotIndex, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("store: open index: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("store: read index header of %s: %w", path, err)
	}
	m0, magic := pagecheck.ReadMeta(buf[:n])
	if !magic {
		return fmt.Errorf("%w: %s is not a bbolt database (left untouched; move it away or choose another --index)", ErrNotIndex, path)
	}
	best := m0
	if ps := int64(m0.PageSize); m0.Valid && ps >= 512 && ps <= 1<<20 {
		page := make([]byte, pagecheck.MetaLen)
		if _, err := f.ReadAt(page, ps); err == nil {
			if m1, _ := pagecheck.ReadMeta(page); m1.Valid && m1.PageSize == m0.PageSize && m1.TxID > m0.TxID {
				best = m1
			}
		}
	}
	if !best.Valid {
		return fmt.Errorf("%w: %s: bbolt meta page damaged (left untouched)", ErrCorrupt, path)
	}
	if need := int64(best.PGID) * int64(best.PageSize); size < need {
		return fmt.Errorf("%w: %s is truncated: %d bytes, the index needs %d (left untouched)", ErrCorrupt, path, size, need)
	}
	return nil
}

// openCurrent opens path with bbolt and makes sure the file it locked is
// still the one at path: Compact renames a new file over the index while a
// second opener may be waiting for the old file's lock, and that opener
// must not go on with the replaced file.
func openCurrent(path string, opts Options) (*bolt.DB, error) {
	deadline := time.Now().Add(opts.LockTimeout)
	for {
		db, file, err := openBolt(path, opts)
		if err != nil {
			return nil, err
		}
		now, err := os.Stat(path)
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("store: open %s: %w (it went away while waiting for its lock)", path, err)
		}
		if locked, err := file.Stat(); err == nil && os.SameFile(locked, now) {
			return db, nil
		}
		_ = db.Close()
		if opts.LockTimeout = time.Until(deadline); opts.LockTimeout <= 0 {
			return nil, fmt.Errorf("%w: %s was replaced repeatedly while waiting for its lock", ErrLocked, path)
		}
	}
}

// openBolt opens path with bbolt; file is the file bbolt opened and locked.
func openBolt(path string, opts Options) (db *bolt.DB, file *os.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				_ = file.Close() // releases the lock bbolt took
			}
			db, err = nil, fmt.Errorf("%w: %s: %v (left untouched)", ErrCorrupt, path, r)
		}
	}()
	open := func(name string, flag int, mode os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, mode)
		file = f
		return f, err
	}
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		OpenFile:        open,
		Timeout:         opts.LockTimeout,
		ReadOnly:        opts.ReadOnly,
		NoSync:          opts.NoSync,
		FreelistType:    bolt.FreelistMapType,
		NoStatistics:    true,
		InitialMmapSize: initialMap(opts.ReadOnly),
	})
	switch {
	case err == nil:
		return db, file, nil
	case errors.Is(err, bolterr.ErrTimeout):
		return nil, nil, fmt.Errorf("%w: another annexd holds %s (gave up after %s)", ErrLocked, path, opts.LockTimeout)
	case errors.Is(err, bolterr.ErrInvalid), errors.Is(err, bolterr.ErrVersionMismatch), errors.Is(err, bolterr.ErrChecksum):
		return nil, nil, fmt.Errorf("%w: %s: %v (left untouched)", ErrCorrupt, path, err)
	}
	return nil, nil, fmt.Errorf("store: open %s: %w%s", path, unwritable(err), indexfile.Hint(err))
}

// initialMapSize is how much of the index a writable store maps at open.
// bbolt maps the file again each time it outgrows its map (doubling up to
// 1 GiB); each remap copies every node the write transaction has touched
// to the heap and waits for every open read transaction. Mapping 1 GiB of
// address space up front spares a first scan of 10^6 files all of them.
// The file itself grows as pages are written, in bbolt's steps of 16 MiB
// (on Linux; bbolt truncates it to the map only on Windows), with the step
// ahead left sparse, and untouched pages of the map cost no memory.
const initialMapSize = 1 << 30

func initialMap(readOnly bool) int {
	if readOnly || strconv.IntSize < 64 {
		return 0
	}
	return initialMapSize
}

// openChecked opens the index and checks (or migrates) its schema. After
// a migration that replaced the file it returns migrate.ErrReplaced: the
// caller opens the new file.
func openChecked(path string, opts Options) (*bolt.DB, error) {
	db, err := openCurrent(path, opts)
	if err != nil {
		return nil, err
	}
	if err := checkSchemaSafely(db, path, opts); err != nil {
		_ = db.Close()
		return nil, err
	}
	if !opts.ReadOnly { // check-db reads everything instead
		if err := quickCheck(db, path); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	return db, nil
}

// checkSchemaSafely is checkSchema with a damaged page reported as
// ErrCorrupt instead of a crash.
func checkSchemaSafely(db *bolt.DB, path string, opts Options) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v (left untouched)", ErrCorrupt, path, r)
		}
	}()
	return checkSchema(db, path, opts)
}

// checkSchema verifies that db is an annexd index and migrates it to
// SchemaVersion when it is older.
func checkSchema(db *bolt.DB, path string, opts Options) error {
	var version uint64
	err := db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(codec.BucketMeta)
		if m == nil || !bytes.Equal(m.Get(codec.MetaFormat), []byte(formatID)) {
			return fmt.Errorf("%w: %s is a bbolt database of another program (left untouched)", ErrNotIndex, path)
		}
		v, n := binary.Uvarint(m.Get(codec.MetaSchema))
		if n <= 0 {
			return fmt.Errorf("%w: %s: schema version unreadable", ErrCorrupt, path)
		}
		version = v
		return nil
	})
	switch {
	case err != nil:
		return err
	case version > SchemaVersion:
		return fmt.Errorf("%w: %s has schema %d, this annexd knows %d (upgrade annexd)", ErrNewerSchema, path, version, SchemaVersion)
	case version < SchemaVersion && opts.ReadOnly:
		return fmt.Errorf("%w: %s has schema %d, want %d (start annexd once to migrate it)", ErrNeedsMigration, path, version, SchemaVersion)
	case version < SchemaVersion:
		if err := migrate.Run(db, version, SchemaVersion, migrateConfig(path, opts)); err != nil {
			return err
		}
	}
	return db.View(func(tx *bolt.Tx) error {
		for _, b := range codec.AllBuckets {
			if tx.Bucket(b) == nil {
				return fmt.Errorf("%w: %s: bucket %q missing", ErrCorrupt, path, b)
			}
		}
		return nil
	})
}
