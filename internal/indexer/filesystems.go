package indexer

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
)

// A record names its file system by id (fsstat), and a file system can be
// away: a disk unplugged or unmounted, while its mount point stays, or
// another disk mounted in its place. The rule for the records of a file
// system that is not where they are:
//
//   - a record of file system E whose place (the nearest directory above
//     its path that exists) is on another file system is not dropped: E
//     is not mounted there now. It stays, and holds again when E comes
//     back;
//   - a file of file system H at a path whose record is of E shelves E's
//     record (store's shelf) instead of replacing it, and takes it back
//     when E's file is there again;
//   - the exceptions: subvolumes of one disk (a btrfs subvolume deleted
//     goes with its disk's other files: fsstat.Disk), and file systems
//     with no lasting id (a tmpfs, a record from before ids), which are
//     never back.
//
// The index remembers each file system it met in its meta (fsMeta): what
// it was called, where it was mounted, when it was last met.

// fsMeta prefixes the meta names of the file systems the index met.
const fsMeta = "fs/"

// FileSystem is what the index remembers of a file system.
type FileSystem struct {
	ID       uint64 `json:"-"`
	Key      string `json:"key"`
	Type     string `json:"type,omitempty"`
	Source   string `json:"source,omitempty"`
	Point    string `json:"point,omitempty"`
	LastSeen int64  `json:"last_seen"` // Unix ns
}

// fileSystems knows the file systems of the records.
type fileSystems struct {
	st   *store.Store
	log  *slog.Logger
	mu   sync.Mutex
	seen map[uint64]bool        // met in this run
	byID map[uint64]*FileSystem // every one the index met
}

func newFileSystems(st *store.Store, log *slog.Logger) *fileSystems {
	f := &fileSystems{st: st, log: log, seen: map[uint64]bool{}, byID: map[uint64]*FileSystem{}}
	_ = st.MetaPrefix(context.Background(), fsMeta, func(name string, v []byte) error {
		id, err := strconv.ParseUint(strings.TrimPrefix(name, fsMeta), 16, 64)
		var fs FileSystem
		if err != nil || json.Unmarshal(v, &fs) != nil {
			log.Warn("unreadable file system in the index's meta; ignored", "name", name)
			return nil
		}
		fs.ID = id
		f.byID[id] = &fs
		fsstat.Remember(fs.Key, fs.Point)
		return nil
	})
	return f
}

// learn notes that a file of file system dev was met now; the first time
// in a run, the index remembers what the file system is.
func (f *fileSystems) learn(dev uint64) {
	f.mu.Lock()
	if f.seen[dev] {
		f.mu.Unlock()
		return
	}
	f.seen[dev] = true
	desc, ok := fsstat.Describe(dev)
	if !ok || fsstat.Volatile(dev) {
		f.mu.Unlock()
		return
	}
	if desc.Twin != "" {
		f.log.Warn("this file system has the UUID of another one (a copy of a disk?): it is indexed "+
			"under an id of its own; give it a UUID of its own, unmounted: "+
			"tune2fs -U random (ext4), xfs_admin -U generate (XFS), btrfstune -u (btrfs)",
			"point", desc.Point, "source", desc.Source, "same_uuid_as", desc.Twin, "key", desc.Key)
	}
	fs := &FileSystem{ID: dev, Key: desc.Key, Type: desc.Type, Source: desc.Source, Point: desc.Point,
		LastSeen: time.Now().UnixNano()}
	if old := f.byID[dev]; old != nil && fs.Point == "" {
		fs.Type, fs.Source, fs.Point = old.Type, old.Source, old.Point
	}
	f.byID[dev] = fs
	fsstat.Remember(fs.Key, fs.Point)
	v, _ := json.Marshal(fs)
	f.mu.Unlock()
	f.st.Submit(store.Change{Op: store.OpPutMeta, Path: []byte(fsMetaName(dev)), Value: v}, func(err error) {
		if err != nil {
			f.log.Warn("cannot remember a file system", "id", fmt.Sprintf("%x", dev), "err", err)
		}
	})
}

func fsMetaName(id uint64) string { return fmt.Sprintf("%s%016x", fsMeta, id) }

// List returns every file system the index met, and whether each was met
// in this run.
func (f *fileSystems) list() ([]FileSystem, map[uint64]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]FileSystem, 0, len(f.byID))
	met := make(map[uint64]bool, len(f.seen))
	for id, fs := range f.byID {
		out = append(out, *fs)
		met[id] = f.seen[id]
	}
	return out, met
}

// Away lists the file systems with records on the store's shelf, and how
// many each has there.
func (ix *Indexer) Away(ctx context.Context) ([]FileSystem, map[uint64]int, error) {
	if !ix.st.HasShelved() {
		return nil, nil, nil
	}
	counts, err := ix.st.ShelfCount(ctx)
	if err != nil {
		return nil, nil, err
	}
	known, _ := ix.fsys.list()
	byID := map[uint64]FileSystem{}
	for _, fs := range known {
		byID[fs.ID] = fs
	}
	var out []FileSystem
	for id := range counts {
		fs, ok := byID[id]
		if !ok {
			fs = FileSystem{ID: id, Key: "unknown"}
		}
		out = append(out, fs)
	}
	slices.SortFunc(out, func(a, b FileSystem) int { return cmp.Compare(a.Point+a.Key, b.Point+b.Key) })
	return out, counts, nil
}

// absent reports whether the records of file system dev, at a place now
// on file system here, are of a file system that is not mounted there
// (see the rule above).
func (f *fileSystems) absent(dev, here uint64) bool {
	if dev == here || !fsstat.Stable(dev) {
		return false
	}
	a, okA := f.keyOf(dev)
	b, okB := f.keyOf(here)
	return !okA || !okB || fsstat.Disk(a) != fsstat.Disk(b)
}

// keyOf returns the key of file system id, as the index or this process
// knows it.
func (f *fileSystems) keyOf(id uint64) (string, bool) {
	f.mu.Lock()
	fs := f.byID[id]
	f.mu.Unlock()
	if fs != nil {
		return fs.Key, true
	}
	desc, ok := fsstat.Describe(id)
	return desc.Key, ok
}

// keepAbsent returns the keep rule of a drop at path (store.DropFenced):
// the records of file systems absent from path's place stay. Nil when the
// place cannot be told.
func (f *fileSystems) keepAbsent(path string) func(dev uint64) bool {
	here, ok := placeOf(path)
	if !ok {
		return nil
	}
	return func(dev uint64) bool { return f.absent(dev, here) }
}

// placeOf returns the file system of the nearest directory above path
// that exists.
func placeOf(path string) (uint64, bool) {
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		if fi, err := fsstat.Lstat(d); err == nil && fi.IsDir() {
			return fi.Dev, true
		}
		if d == "/" || d == "." {
			return 0, false
		}
	}
}

// places caches placeOf by directory, for one sweep.
type places map[string]uint64

func (p places) of(path string) (uint64, bool) {
	dir := filepath.Dir(path)
	if id, ok := p[dir]; ok {
		return id, true
	}
	id, ok := placeOf(path)
	if ok {
		p[dir] = id
	}
	return id, ok
}
