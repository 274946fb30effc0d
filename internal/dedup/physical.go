package dedup

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
)

// SurveyGroup surveys every inode of a duplicate group: see surveyFiles.
// The result covers the whole group, so the store may keep it
// (store.PutSurvey).
func SurveyGroup(g store.Group) (store.Survey, []store.Seen) {
	files := make([]File, len(g.Members))
	for i, m := range g.Members {
		files[i] = File{Path: m.Path, Record: m.Record}
	}
	return surveyFiles(files, g.Size)
}

// Keepable reports whether the index may keep sv, the survey of g: not
// when an inode could not be surveyed because its file system is not
// mounted at its path (fsstat.Away: a disk unplugged or unmounted). A
// survey is kept until a record of its group changes, and the disk's
// return changes none: the group would stay "not surveyed", its bytes
// not reclaimable, until a write.
func Keepable(sv *store.Survey, g store.Group) bool {
	for _, m := range g.Members {
		i := sv.Find(m.Record.Dev, m.Record.Ino)
		if i >= 0 && !sv.Inodes[i].Known && fsstat.Away(string(m.Path), m.Record.Dev) {
			return false
		}
	}
	return true
}

// surveyFiles reads the extent map of each inode the files name, reading
// only: how many bytes each has in blocks, how many of those no other
// file shares, and which inodes share blocks (one physical copy). Holes
// count nothing, and neither does what lies beyond the file's last block.
// Names of one inode are read once, through the first that still opens
// as that inode. An inode none of whose names does is not Known: its
// Placed and Alone are then size, and it reclaims nothing.
func surveyFiles(files []File, size int64) (store.Survey, []store.Seen) {
	names := namesByInode(files)
	sv := store.Survey{At: time.Now().UnixNano(), Inodes: make([]store.SurveyInode, len(names))}
	seen := make([]store.Seen, len(names))
	var shared []placedExtent
	for i, n := range names {
		in, sn, exts := surveyInode(n.names, n.dev, n.ino, size)
		sv.Inodes[i], seen[i] = in, sn
		for _, e := range exts {
			shared = append(shared, placedExtent{dev: n.dev, physical: e.physical, length: e.length, inode: i})
		}
	}
	copies(sv.Inodes, shared)
	return sv, seen
}

// inodeNames is one inode and its names among the files surveyed.
type inodeNames struct {
	dev, ino uint64
	names    [][]byte
}

// namesByInode groups the files' paths by inode, in device and inode
// order, as a store.Survey lists them.
func namesByInode(files []File) []inodeNames {
	var out []inodeNames
	for _, f := range files {
		out = append(out, inodeNames{dev: f.Record.Dev, ino: f.Record.Ino, names: [][]byte{f.Path}})
	}
	slices.SortStableFunc(out, func(a, b inodeNames) int {
		return cmp.Or(cmp.Compare(a.dev, b.dev), cmp.Compare(a.ino, b.ino))
	})
	n := 0
	for _, in := range out {
		if n > 0 && out[n-1].dev == in.dev && out[n-1].ino == in.ino {
			out[n-1].names = append(out[n-1].names, in.names...)
			continue
		}
		out[n] = in
		n++
	}
	return out[:n]
}

// surveyInode surveys one inode through the first of its names that opens
// as that inode. It returns the shared extents it found, for copies.
func surveyInode(names [][]byte, dev, ino uint64, size int64) (store.SurveyInode, store.Seen, []extent) {
	in := store.SurveyInode{Dev: dev, Ino: ino, Placed: size, Alone: size}
	for _, p := range names {
		fd, st, err := openRaw(p)
		if err != nil {
			continue
		}
		fi := fsstat.FromFstat(fd, &st)
		if !fi.IsRegular() || !fsstat.OnFS(dev, fi) || fi.Ino != ino {
			unix.Close(fd)
			continue
		}
		seen := store.Seen{Size: fi.Size, MtimeNs: fi.MtimeNs, CtimeNs: fi.CtimeNs}
		end := blockEnd(fi.Size, int64(st.Blksize))
		exts, err := fiemap(fd, fi.Size)
		unix.Close(fd)
		in.Known = true
		if err != nil {
			// No extent map (tmpfs, some network file systems): the
			// allocated blocks, none of them shared.
			in.Placed = min(st.Blocks*512, end)
			in.Alone = in.Placed
			return in, seen, nil
		}
		var shared []extent
		in.Placed, in.Alone, shared = measure(exts, end)
		return in, seen, shared
	}
	return in, store.Seen{}, nil // the store checks no identity of an inode not Known
}

// openRaw opens a file as openFile does, for reading its extent map, and
// stats it. A bare descriptor: an *os.File would register each with the
// runtime's poller, a quarter of a survey's time.
func openRaw(path []byte) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	if len(path) == 0 || path[0] != '/' {
		return -1, st, fmt.Errorf("%w: %q is not absolute", ErrPath, path)
	}
	rel := string(path[1:])
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{Flags: uint64(unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY),
		Resolve: resolve}
	fd, err := unix.Openat2(rootFD(), rel, &how)
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// blockEnd is size rounded up to whole blocks of blksize: what a file's
// last block holds beyond its end is still the file's.
func blockEnd(size, blksize int64) int64 {
	if blksize <= 0 {
		return size
	}
	return (size + blksize - 1) / blksize * blksize
}

// measure sums the placed bytes of exts below end and those no other file
// shares, and returns the shared extents, cut at end. Extents past end
// (preallocated room) are not the content's.
func measure(exts []extent, end int64) (placedBytes, alone int64, shared []extent) {
	for _, e := range exts {
		if e.unplaced() || int64(e.logical) >= end {
			continue
		}
		e.length = min(e.length, uint64(end)-e.logical)
		placedBytes += int64(e.length)
		if e.shared() {
			shared = append(shared, e)
		} else {
			alone += int64(e.length)
		}
	}
	return placedBytes, alone, shared
}

// placedExtent is a shared extent of an inode of a survey.
type placedExtent struct {
	dev, physical, length uint64
	inode                 int
}

// copies sets each inode's Copy: inodes whose shared extents overlap on
// their device are one physical copy, named by its first inode. It sorts
// the extents by place and joins each to the run of overlapping ones
// before it, so a group of any size costs one sort.
func copies(inodes []store.SurveyInode, exts []placedExtent) {
	parent := make([]int, len(inodes))
	for i := range parent {
		parent[i] = i
	}
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	slices.SortFunc(exts, func(a, b placedExtent) int {
		return cmp.Or(cmp.Compare(a.dev, b.dev), cmp.Compare(a.physical, b.physical))
	})
	var runEnd uint64
	for i, e := range exts {
		if i > 0 && e.dev == exts[i-1].dev && e.physical < runEnd {
			a, b := find(e.inode), find(exts[i-1].inode)
			parent[max(a, b)] = min(a, b) // the root stays the smallest index
			runEnd = max(runEnd, e.physical+e.length)
			continue
		}
		runEnd = e.physical + e.length
	}
	for i := range inodes {
		inodes[i].Copy = find(i)
	}
}

// SurveyMissing surveys each duplicate group the index keeps no survey
// of and hands the survey to the index, so that what the index says is
// reclaimable covers every group. Before each group it calls wait, when
// not nil, which may block (while the daemon is busy) or end the walk
// with its error. It returns how many groups it surveyed, once the index
// has taken or refused each survey.
func (d *Deduper) SurveyMissing(ctx context.Context, wait func(context.Context) error) (int, error) {
	n := 0
	var kept sync.WaitGroup
	defer kept.Wait()
	err := d.idx.Dups(ctx, store.DupOptions{Brief: true}, func(g store.Group) error {
		if g.Survey != nil {
			return nil
		}
		if wait != nil {
			if err := wait(ctx); err != nil {
				return err
			}
		}
		sv, seen := SurveyGroup(g)
		if !Keepable(&sv, g) {
			return nil
		}
		kept.Add(1)
		d.idx.SubmitSurvey(g.Backend, g.Digest, sv, seen, func(error) { kept.Done() })
		n++
		return nil
	})
	return n, err
}
