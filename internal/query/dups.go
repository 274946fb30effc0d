package query

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/dedup"
	"github.com/annexd/annexd/internal/roots"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// Dups lists the store's groups with what their surveys of block sharing
// found (surveyOf). Unless q.Outside, members outside the roots are left
// out, the figures count the inodes left, and groups left with fewer than
// two are skipped; with q.Paths, groups with no member at or below one
// are skipped. The limit then counts the groups sent.
func (x *Index) Dups(ctx context.Context, q api.DupQuery, fn func(api.DupGroup) error) error {
	// group reads only what the digest index keeps of each record.
	opts := store.DupOptions{MinSize: q.MinSize, After: q.After, Limit: q.Limit, Brief: true}
	skips := !q.Outside || len(q.Paths) > 0
	if skips {
		opts.Limit = 0
	}
	sent := 0
	var marks shareMarks // one for every group: its room is used again
	return x.cfg.Store.Dups(ctx, opts, func(g store.Group) error {
		if skips && q.Limit > 0 && sent == q.Limit {
			return store.ErrStop
		}
		if !anyWithin(g.Members, q.Paths) {
			return nil
		}
		marks.reset(x.surveyOf(g, q.Resurvey))
		out, ok, err := x.group(g, &marks, q.Outside)
		if err != nil || !ok {
			return err
		}
		sent++
		return fn(out)
	})
}

// surveyOf returns the survey of g's blocks: the one the store keeps,
// unless again, or a new one, which the store is given to keep.
func (x *Index) surveyOf(g store.Group, again bool) *store.Survey {
	if g.Survey != nil && !again {
		return g.Survey
	}
	sv, seen := dedup.SurveyGroup(g)
	if dedup.Keepable(&sv, g) {
		x.cfg.Store.SubmitSurvey(g.Backend, g.Digest, sv, seen, nil)
	}
	return &sv
}

// anyWithin reports whether a member is at or below one of paths; no
// paths: true.
func anyWithin(ms []store.Member, paths [][]byte) bool {
	if len(paths) == 0 {
		return true
	}
	for _, m := range ms {
		for _, p := range paths {
			if roots.Within(string(m.Path), string(p)) {
				return true
			}
		}
	}
	return false
}

// group turns a store group and what its survey says (marks, reset to
// it) into an API group; ok is false when, without the members outside
// the roots, it is no longer a duplicate group.
func (x *Index) group(g store.Group, marks *shareMarks, withOutside bool) (out api.DupGroup, ok bool, err error) {
	out = api.DupGroup{
		Backend: g.Backend.WithExtension(), Digest: g.Digest, Size: g.Size, Cursor: g.Cursor,
		Files: make([]api.Location, 0, len(g.Members)), SurveyedAt: time.Unix(0, marks.sv.At),
	}
	slices.SortFunc(g.Members, func(a, b store.Member) int { return bytes.Compare(a.Path, b.Path) })
	var (
		firsts firstNames
		keys   keyCache
	)
	for _, m := range g.Members {
		outside := x.outsideRoot(m.Path)
		if outside && !withOutside {
			continue
		}
		loc, err := keys.location(m.Path, &m.Record)
		if err != nil {
			return out, false, err
		}
		loc.OutsideRoots = outside
		loc.LinkOf = firsts.linkOf(m.Record.Dev, m.Record.Ino, m.Path)
		if loc.LinkOf == nil {
			loc.SharesWith = marks.sharesWith(m.Record.Dev, m.Record.Ino, m.Path)
		}
		out.Files = append(out.Files, loc)
	}
	out.Copies = firsts.inodes()
	if out.Copies < 2 {
		return out, false, nil
	}
	out.Duplicate = g.Size * int64(out.Copies-1)
	out.Reclaimable, out.Physical, out.Unsurveyed = marks.figures()
	return out, true, nil
}

// shareMarks marks the members of a group that share blocks with an
// earlier one, and counts what the survey says of the inodes listed.
type shareMarks struct {
	sv    *store.Survey
	marks []shareMark // by survey index
}

// shareMark is what shareMarks knows of one inode of the survey: whether
// a name of it is listed and, for the first inode of a physical copy, its
// first name listed.
type shareMark struct {
	listed bool
	first  []byte
}

func newShareMarks(sv *store.Survey) *shareMarks {
	var s shareMarks
	s.reset(sv)
	return &s
}

// reset makes s mark by sv, with nothing listed yet.
func (s *shareMarks) reset(sv *store.Survey) {
	n := len(sv.Inodes)
	s.sv, s.marks = sv, slices.Grow(s.marks[:0], n)[:n]
	clear(s.marks)
}

// sharesWith returns the first name listed of another inode whose blocks
// (dev, ino) shares, or nil when it is the first of its physical copy
// (then recorded) or the survey does not know it.
func (s *shareMarks) sharesWith(dev, ino uint64, path []byte) []byte {
	i := s.sv.Find(dev, ino)
	if i < 0 {
		return nil
	}
	s.marks[i].listed = true
	c := &s.marks[s.sv.Inodes[i].Copy]
	if c.first != nil {
		return c.first
	}
	c.first = path
	return nil
}

// figures returns the reclaimable bytes, the physical copies and the
// copies not surveyed among the inodes listed.
func (s *shareMarks) figures() (reclaimable int64, physical, unsurveyed int) {
	for i, m := range s.marks {
		if m.first != nil { // the first name listed of a physical copy
			physical++
		}
		if m.listed && !s.sv.Inodes[i].Known {
			unsurveyed++
		}
	}
	return s.sv.Reclaimable(func(i int) bool { return s.marks[i].listed }), physical, unsurveyed
}

// keyCache hands the last key made for a group's member to the next
// member with the same backend, size and extensions: a key depends on the
// base name only through what follows its first dot (key.Extension), and
// the digest is the group's.
type keyCache struct {
	b      key.Backend
	size   int64
	suffix []byte
	k      key.Key
	ok     bool
}

func (c *keyCache) location(p []byte, rec *store.Record) (api.Location, error) {
	sfx := extensions(p)
	if c.ok && c.b == rec.Backend && c.size == rec.Size && bytes.Equal(c.suffix, sfx) {
		return api.Location{Path: p, Key: c.k, Size: rec.Size, State: rec.State.String()}, nil
	}
	loc, err := location(p, rec)
	if err == nil {
		*c = keyCache{b: rec.Backend, size: rec.Size, suffix: sfx, k: loc.Key, ok: true}
	}
	return loc, err
}

// extensions returns what key.Extension reads of a path: its base name
// from the first dot after any leading dots, or nothing.
func extensions(p []byte) []byte {
	base := bytes.TrimLeft(p[bytes.LastIndexByte(p, '/')+1:], ".")
	if dot := bytes.IndexByte(base, '.'); dot >= 0 {
		return base[dot:]
	}
	return nil
}

// firstNames remembers the first listed name of each inode of a group.
// Most groups have a few members: a list is searched until it grows long,
// then a map takes over.
type firstNames struct {
	list []firstName
	m    map[[2]uint64][]byte
}

type firstName struct {
	in   [2]uint64 // dev, ino
	path []byte
}

// maxFirstList is how many inodes firstNames searches in a list.
const maxFirstList = 16

// linkOf returns the first name met of (dev, ino), or nil when path is
// that first name, which it then records.
func (f *firstNames) linkOf(dev, ino uint64, path []byte) []byte {
	in := [2]uint64{dev, ino}
	if f.m == nil {
		for _, e := range f.list {
			if e.in == in {
				return e.path
			}
		}
		if len(f.list) < maxFirstList {
			f.list = append(f.list, firstName{in, path})
			return nil
		}
		f.m = make(map[[2]uint64][]byte, 2*maxFirstList)
		for _, e := range f.list {
			f.m[e.in] = e.path
		}
	}
	if p, ok := f.m[in]; ok {
		return p
	}
	f.m[in] = path
	return nil
}

// inodes is the number of distinct inodes recorded.
func (f *firstNames) inodes() int {
	if f.m != nil {
		return len(f.m)
	}
	return len(f.list)
}
