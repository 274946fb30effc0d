package store

import (
	"bytes"
	"context"
	"encoding/binary"
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

// DupFiles calls fn for each duplicate group, as Dups lists them but in
// backend and digest order, with its files in index order. It reads the
// groups and the digest index side by side, each in key order, in short
// transactions one chunk ahead of fn, into two buffers used in turn: a
// listing of every group seeks once a chunk, not once a group, and
// allocates little more than the surveys it decodes. Everything fn is
// handed, Files and Paths included, is valid only during the call; fn
// may reorder Files. fn may return ErrStop.
func (s *Store) DupFiles(ctx context.Context, fn func(*GroupFiles) error) error {
	if err := s.settle(ctx); err != nil {
		return err
	}
	names := s.newNamer()
	names.dense = true
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
	last   []byte // the last groups key read
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

// groupChunk reads the groups after groups key after (nil: from the
// first) into gc, up to maxMembersPerTx members; more reports that it
// stopped early, last is the last groups key read.
func (s *Store) groupChunk(names *namer, gc *groupChunk, after []byte) (last []byte, more bool, err error) {
	gc.reset()
	err = names.view(func(tx *bolt.Tx, n *namer) error {
		surveys := tx.Bucket(codec.BucketSurveys) // nil in an index without surveys
		if surveys != nil {
			if k, _ := surveys.Cursor().First(); k == nil {
				surveys = nil // none kept: no look-up a group
			}
		}
		var sk []byte
		c := tx.Bucket(codec.BucketGroups).Cursor()
		k, v := c.First()
		if after != nil {
			if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
				k, v = c.Next()
			}
		}
		if k == nil {
			return nil
		}
		dc := tx.Bucket(codec.BucketDigest).Cursor()
		m, mv := dc.Seek(k)
		members := 0
		for ; k != nil; k, v = c.Next() {
			if members >= maxMembersPerTx {
				more = true
				return nil
			}
			g, err := decodeGroup(v)
			if err != nil {
				return fmt.Errorf("group %x: %w", k, err)
			}
			gc.last = append(gc.last[:0], k...)
			if len(k) < 2 || g.inodes < 2 {
				members++
				continue // hard links of one inode: no duplicate
			}
			for m != nil && bytes.Compare(m, k) < 0 {
				m, mv = dc.Next() // a content of one file
			}
			var sv []byte
			if surveys != nil {
				sk = append(binary.BigEndian.AppendUint64(sk[:0], ^uint64(g.duplicate())), k...) // codec.DescKey
				sv = surveys.Get(sk)
			}
			before := len(gc.files)
			if m, mv, err = gc.add(n, dc, m, mv, k, g, sv); err != nil {
				return err
			}
			members += 1 + len(gc.files) - before
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	gc.fix()
	return gc.last, more, nil
}

// add reads the group dk, summary g, survey sv (nil: none): the names
// and inodes of its files from the digest index, whose cursor dc is at
// (m, mv), at or before the group's first entry. It returns the entry
// after the group's last.
func (gc *groupChunk) add(n *namer, dc *bolt.Cursor, m, mv, dk []byte, g group, sv []byte) ([]byte, []byte, error) {
	grp := GroupFiles{Backend: key.Backend(dk[0]), Size: g.size}
	if sv != nil {
		d, _, _, err := decodeSurvey(sv)
		if err != nil {
			return nil, nil, fmt.Errorf("survey %x: %w", dk, err)
		}
		grp.Survey = &d
	}
	gc.at = append(gc.at, len(gc.arena))
	gc.arena = append(gc.arena, dk[1:]...)
	gc.groups = append(gc.groups, grp)
	for ; m != nil && bytes.HasPrefix(m, dk); m, mv = dc.Next() {
		id, base, ok := codec.SplitFileKey(m[len(dk):])
		if !ok {
			return nil, nil, fmt.Errorf("%w: bad file key %x", ErrCorrupt, m[len(dk):])
		}
		dir, err := n.dir(id)
		if err != nil {
			return nil, nil, err
		}
		_, dev, ino, err := codec.DecodeDigestValue(mv)
		if err != nil {
			return nil, nil, fmt.Errorf("digest index entry of %q: %w", joinPath(dir, base), err)
		}
		gc.at = append(gc.at, len(gc.arena))
		gc.arena = append(append(gc.arena, dir...), base...)
		gc.files = append(gc.files, GroupFile{Dir: len(dir), Dev: dev, Ino: ino})
	}
	gc.ends = append(gc.ends, len(gc.files))
	return m, mv, nil
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
