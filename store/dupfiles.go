package store

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

// GroupFiles is one duplicate group as DupFiles hands it over: its
// content, its survey and the names and inodes of its files.
type GroupFiles struct {
	Backend key.Backend // the base backend
	Digest  []byte
	Size    int64
	Survey  *Survey // nil when the group has none
	Files   []GroupFile
}

// GroupFile is one file of a group: where it is and its inode.
type GroupFile struct {
	Path     []byte
	Dir      int // Path[:Dir] is its directory as the dirs index keys it ("/a/b/")
	Dev, Ino uint64
}

// DupFiles calls fn for each duplicate group, in the order of Dups,
// with its files in index order. It reads what Dups with Brief reads,
// in the same short transactions, one chunk ahead of fn, but into two
// buffers used in turn: a listing of every group allocates little more
// than the surveys it decodes. Everything fn is handed, Files and Paths
// included, is valid only during the call; fn may reorder Files. fn may
// return ErrStop.
func (s *Store) DupFiles(ctx context.Context, fn func(*GroupFiles) error) error {
	if err := s.settle(ctx); err != nil {
		return err
	}
	names := s.newNamer()
	read := func(gc *groupChunk, after []byte) ([]byte, bool, error) {
		return s.groupChunk(names, gc, after)
	}
	return readAhead(ctx, read, func(gc *groupChunk) error { return gc.each(fn) })
}

// groupChunk holds one chunk of DupFiles, copied out of the transaction.
// While it is read, slices are kept as offsets into arena (which may
// move as it grows) and made by fix.
type groupChunk struct {
	groups []GroupFiles
	files  []GroupFile
	arena  []byte // digests and paths
	at     []int  // per group its digest's start, then per file its path's start
	ends   []int  // group i's files end at files[ends[i]]
	last   []byte // the last dups key read
}

func (gc *groupChunk) reset() {
	gc.groups, gc.files, gc.arena = gc.groups[:0], gc.files[:0], gc.arena[:0]
	gc.at, gc.ends, gc.last = gc.at[:0], gc.ends[:0], gc.last[:0]
}

// each hands fn the chunk's groups in turn.
func (gc *groupChunk) each(fn func(*GroupFiles) error) error {
	for i := range gc.groups {
		if err := fn(&gc.groups[i]); err != nil {
			return err
		}
	}
	return nil
}

// groupChunk reads the groups after dups key after (nil: from the first)
// into gc, up to maxMembersPerTx members; more reports that it stopped
// early, last is the last dups key read.
func (s *Store) groupChunk(names *namer, gc *groupChunk, after []byte) (last []byte, more bool, err error) {
	gc.reset()
	err = names.view(func(tx *bolt.Tx, n *namer) error {
		dc := tx.Bucket(codec.BucketDigest).Cursor()
		sc := newSurveyCursor(tx)
		c := tx.Bucket(codec.BucketDups).Cursor()
		k, v := c.First()
		if after != nil {
			if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
				k, v = c.Next()
			}
		}
		members := 0
		for ; k != nil; k, v = c.Next() {
			if members >= maxMembersPerTx {
				more = true
				return nil
			}
			if len(k) < 9 {
				return fmt.Errorf("%w: dups key %x", ErrCorrupt, k)
			}
			g, err := decodeGroup(v)
			if err != nil {
				return fmt.Errorf("group %x: %w", k[8:], err)
			}
			before := len(gc.files)
			if err := gc.add(n, dc, sc, k, g); err != nil {
				return err
			}
			members += 1 + len(gc.files) - before
			gc.last = append(gc.last[:0], k...)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	gc.fix()
	return gc.last, more, nil
}

// add reads the group whose dups key is k, summary g: its survey and
// the names and inodes of its files.
func (gc *groupChunk) add(n *namer, dc *bolt.Cursor, sc *surveyCursor, k []byte, g group) error {
	dk := k[8:]
	grp := GroupFiles{Backend: key.Backend(dk[0]), Size: g.size}
	if v := sc.at(k); v != nil {
		sv, _, _, err := decodeSurvey(v)
		if err != nil {
			return fmt.Errorf("survey %x: %w", dk, err)
		}
		grp.Survey = &sv
	}
	gc.at = append(gc.at, len(gc.arena))
	gc.arena = append(gc.arena, dk[1:]...)
	gc.groups = append(gc.groups, grp)
	for m, mv := dc.Seek(dk); m != nil && bytes.HasPrefix(m, dk); m, mv = dc.Next() {
		id, base, ok := codec.SplitFileKey(m[len(dk):])
		if !ok {
			return fmt.Errorf("%w: bad file key %x", ErrCorrupt, m[len(dk):])
		}
		dir, err := n.dir(id)
		if err != nil {
			return err
		}
		_, dev, ino, err := codec.DecodeDigestValue(mv)
		if err != nil {
			return fmt.Errorf("digest index entry of %q: %w", joinPath(dir, base), err)
		}
		gc.at = append(gc.at, len(gc.arena))
		gc.arena = append(append(gc.arena, dir...), base...)
		gc.files = append(gc.files, GroupFile{Dir: len(dir), Dev: dev, Ino: ino})
	}
	gc.ends = append(gc.ends, len(gc.files))
	return nil
}

// fix points the groups' digests and files and the files' paths into
// the final arena: each piece ends where the next begins.
func (gc *groupChunk) fix() {
	piece := func(i int) []byte {
		end := len(gc.arena)
		if i+1 < len(gc.at) {
			end = gc.at[i+1]
		}
		return gc.arena[gc.at[i]:end:end]
	}
	at, f := 0, 0
	for i := range gc.groups {
		g := &gc.groups[i]
		g.Digest = piece(at)
		at++
		g.Files = gc.files[f:gc.ends[i]:gc.ends[i]]
		for ; f < gc.ends[i]; f++ {
			gc.files[f].Path = piece(at)
			at++
		}
	}
}
