package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store/codec"
)

// DupOptions select and page duplicate groups.
type DupOptions struct {
	MinSize int64  // skip groups of smaller files (1 skips empty files, whose groups hold 0 bytes)
	After   []byte // resume after this Group.Cursor (nil: from the start)
	Limit   int    // at most this many groups (0: all)
	// Brief lists members from the digest index alone, without reading
	// their records: each Member.Record then holds only Backend, Digest,
	// Size, Dev, Ino and State (StateOK), in a third of the time.
	Brief bool
}

// Group is a set of paths with the same content (same bare digest) on at
// least two distinct inodes. Hardlinks of one inode are listed but are
// not extra copies.
type Group struct {
	Backend   key.Backend // the base backend (SHA256, not SHA256E)
	Digest    []byte
	Size      int64
	Inodes    int64 // distinct (dev, ino)
	Duplicate int64 // Size × (Inodes − 1): the extra copies' bytes, shared or not
	Members   []Member
	// Survey is the group's survey of block sharing (PutSurvey), nil
	// when it has none or a record changed since.
	Survey *Survey
	Cursor []byte // pass as DupOptions.After to continue after this group
}

// Member is one path of a group.
type Member struct {
	Path   []byte
	Record Record
}

// maxMembersPerTx bounds the work one read transaction of Dups does.
const maxMembersPerTx = 4 * chunk

// Dups calls fn for each duplicate group, most duplicate bytes first
// (ties in backend and digest order). It keeps one chunk of groups in memory at a
// time (about four thousand members; one group is never split, so a group
// of a million copies is held whole), read in short transactions, and calls
// fn outside of them. With Brief it reads the next chunk while fn handles
// the last one, so up to three chunks are in memory. fn may return ErrStop.
// Records indexed since the last merge are merged first (pending.go).
// Groups are read in separate snapshots: one changed meanwhile is listed
// as it is when its chunk is read.
func (s *Store) Dups(ctx context.Context, opts DupOptions, fn func(Group) error) error {
	if err := s.settle(ctx); err != nil {
		return err
	}
	sent := 0
	use := func(groups []Group) error {
		for _, g := range groups {
			if opts.Limit > 0 && sent >= opts.Limit {
				return ErrStop
			}
			if err := fn(g); err != nil {
				return err
			}
			sent++
		}
		return nil
	}
	var err error
	if opts.Brief {
		err = s.dupsAhead(ctx, opts, use)
	} else {
		err = s.dupChunks(ctx, opts, func(r dupRead) error {
			if r.err != nil {
				return r.err
			}
			return use(r.groups)
		})
	}
	if errors.Is(err, ErrStop) {
		return nil
	}
	return err
}

// dupRead is one chunk of groups, or why it could not be read.
type dupRead struct {
	groups []Group
	err    error
}

// dupChunks reads the chunks of groups in turn and hands each to use,
// until use or a read fails or the groups end.
func (s *reader) dupChunks(ctx context.Context, opts DupOptions, use func(dupRead) error) error {
	after := bytes.Clone(opts.After)
	names := s.newNamer()
	for {
		if err := ctx.Err(); err != nil {
			return use(dupRead{err: err})
		}
		groups, next, more, err := s.dupChunk(names, after, opts)
		if err := use(dupRead{groups: groups, err: err}); err != nil || !more {
			return err
		}
		after = next
	}
}

// dupsAhead is dupChunks with the reads on a goroutine of their own, one
// chunk ahead of use. It returns once that goroutine is done.
func (s *reader) dupsAhead(ctx context.Context, opts DupOptions, use func([]Group) error) error {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan dupRead, 1)
	go func() {
		defer close(ch)
		_ = s.dupChunks(ctx, opts, func(r dupRead) error {
			ch <- r
			return r.err
		})
	}()
	defer func() {
		cancel()
		for range ch { // the reader stops at its next chunk
		}
	}()
	for r := range ch {
		if r.err != nil {
			return r.err
		}
		if err := use(r.groups); err != nil {
			return err
		}
	}
	return nil
}

// dupChunk reads groups after the cursor; next is the last key it examined
// (groups skipped by MinSize included) and more reports that it stopped
// early.
func (s *reader) dupChunk(names *namer, after []byte, opts DupOptions) (out []Group, next []byte, more bool, err error) {
	err = names.view(func(tx *bolt.Tx, n *namer) error {
		mr := memberReader{n: n, files: tx.Bucket(codec.BucketFiles), brief: opts.Brief}
		dc := tx.Bucket(codec.BucketDigest).Cursor()
		sc := newSurveyCursor(tx)
		c := tx.Bucket(codec.BucketDups).Cursor()
		k, v := c.First()
		if after != nil {
			k, v = c.Seek(after)
			if k != nil && bytes.Equal(k, after) {
				k, v = c.Next()
			}
		}
		members := 0
		var last []byte // valid in tx only: cloned into next at the end
		defer func() { next = bytes.Clone(last) }()
		for ; k != nil; k, v = c.Next() {
			if members >= maxMembersPerTx {
				more = true
				return nil
			}
			if len(k) < 9 {
				return fmt.Errorf("%w: dups key %x", ErrCorrupt, k)
			}
			dk := k[8:]
			g, err := decodeGroup(v)
			if err != nil {
				return fmt.Errorf("group %x: %w", dk, err)
			}
			members++
			last = k
			if g.size < opts.MinSize {
				continue
			}
			grp, err := readGroup(&mr, dc, sc, dk, g, k)
			if err != nil {
				return err
			}
			members += len(grp.Members)
			out = append(out, grp)
		}
		return nil
	})
	return out, next, more, err
}

// readGroup reads the members and the survey of group dk, summary g,
// whose key in the dups bucket is k.
func readGroup(mr *memberReader, dc *bolt.Cursor, sc *surveyCursor, dk []byte, g group, k []byte) (Group, error) {
	grp := Group{Backend: key.Backend(dk[0]), Digest: bytes.Clone(dk[1:]), Size: g.size,
		Inodes: g.inodes, Duplicate: g.duplicate(), Cursor: bytes.Clone(k),
		Members: make([]Member, 0, g.n)}
	if v := sc.at(k); v != nil {
		sv, _, _, err := decodeSurvey(v)
		if err != nil {
			return grp, fmt.Errorf("survey %x: %w", dk, err)
		}
		grp.Survey = &sv
	}
	for m, mv := dc.Seek(dk); m != nil && bytes.HasPrefix(m, dk); m, mv = dc.Next() {
		mb, err := mr.member(&grp, m[len(dk):], mv)
		if err != nil {
			return grp, err
		}
		grp.Members = append(grp.Members, mb)
	}
	return grp, nil
}

// DupGroup reads the duplicate group of digest d under backend b (its
// base backend), as Dups would list it; ok is false when d has fewer
// than two inodes. Members not yet merged (pending.go) are not in it.
func (s *reader) DupGroup(b key.Backend, d []byte, opts DupOptions) (grp Group, ok bool, err error) {
	if !b.Valid() || len(d) != b.DigestLen() {
		return grp, false, fmt.Errorf("%w: %d-byte digest for backend %s", ErrRecord, len(d), b)
	}
	dk := append([]byte{byte(b.Base())}, d...)
	err = s.newNamer().view(func(tx *bolt.Tx, n *namer) error {
		v := tx.Bucket(codec.BucketGroups).Get(dk)
		if v == nil {
			return nil
		}
		g, err := decodeGroup(v)
		if err != nil || g.inodes < 2 {
			return err
		}
		mr := memberReader{n: n, files: tx.Bucket(codec.BucketFiles), brief: opts.Brief}
		grp, err = readGroup(&mr, tx.Bucket(codec.BucketDigest).Cursor(), newSurveyCursor(tx), dk, g, codec.DescKey(g.duplicate(), dk))
		ok = err == nil
		return err
	})
	return grp, ok, err
}

// memberReader makes the members of groups from digest-index entries.
type memberReader struct {
	n     *namer
	files *bolt.Bucket
	brief bool // from the digest index alone (DupOptions.Brief)
}

// member makes the member of g whose file key is fk and digest-index
// value v.
func (mr *memberReader) member(g *Group, fk, v []byte) (Member, error) {
	if !mr.brief {
		e, err := makeEntry(mr.n, fk, mr.files.Get(fk))
		return Member{Path: e.path, Record: e.r}, err
	}
	path, err := mr.n.path(fk)
	if err != nil {
		return Member{}, err
	}
	b, dev, ino, err := codec.DecodeDigestValue(v)
	if err != nil {
		return Member{}, fmt.Errorf("digest index entry of %q: %w", path, err)
	}
	return Member{Path: path, Record: Record{Backend: b, Digest: g.Digest, Size: g.Size,
		Dev: dev, Ino: ino, State: StateOK}}, nil
}
