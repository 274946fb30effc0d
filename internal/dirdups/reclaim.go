package dirdups

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/annexd/annexd/store"
)

// reports turns the findings within the paths asked into reports, most
// reclaimable bytes first.
func (f *finder) reports(src Source) ([]Report, error) {
	var (
		out   []Report
		freed [][]int32 // by report: the positions of the inodes it frees
	)
	for _, fd := range f.found {
		if !f.asked(fd.nodes...) {
			continue
		}
		rep := Report{Kind: fd.kind}
		for _, n := range fd.nodes {
			nd := &f.ix.nodes[n]
			rep.Folders = append(rep.Folders, Folder{Path: nd.path, Files: nd.count, Bytes: nd.bytes})
		}
		out = append(out, rep)
		freed = append(freed, f.ix.freedBy(fd.nodes[1:]))
	}
	surveys, err := f.ix.surveys(src, freed)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Reclaimable, out[i].Unsurveyed = f.ix.alone(freed[i], surveys)
	}
	slices.SortFunc(out, func(a, b Report) int {
		return cmp.Or(cmp.Compare(b.Reclaimable, a.Reclaimable), bytes.Compare(a.Folders[1].Path, b.Folders[1].Path))
	})
	return out, nil
}

// asked reports whether one of nodes is at or below one of the paths
// asked for (every node when none was).
func (f *finder) asked(nodes ...int32) bool {
	if len(f.opts.Paths) == 0 {
		return true
	}
	for _, n := range nodes {
		if within(f.ix.nodes[n].path, f.opts.Paths) {
			return true
		}
	}
	return false
}

// within reports whether path is at or below one of dirs.
func within(path []byte, dirs [][]byte) bool {
	for _, d := range dirs {
		if bytes.Equal(path, d) || bytes.HasPrefix(path, d) && (len(d) == 1 || path[len(d)] == '/') {
			return true
		}
	}
	return false
}

// unknown lists the folders in scope (and asked for) that hold files
// with no key of their own.
func (f *finder) unknown() []Unknown {
	var out []Unknown
	for i := range f.ix.nodes {
		nd := &f.ix.nodes[i]
		if own := nd.own; own > 0 && f.scope[i] && f.asked(int32(i)) {
			out = append(out, Unknown{Path: nd.path, Files: own})
		}
	}
	slices.SortFunc(out, func(a, b Unknown) int { return bytes.Compare(a.Path, b.Path) })
	return out
}

// freedBy returns the positions of the files, one name each, whose
// inodes removing the subtrees of drop frees: every name of the inode is
// in them. Empty files free nothing and are left out.
func (ix *index) freedBy(drop []int32) []int32 {
	in := func(p int32) bool {
		for _, n := range drop {
			if nd := &ix.nodes[n]; p >= nd.lo && p < nd.hi {
				return true
			}
		}
		return false
	}
	var out []int32
	for _, n := range drop {
		nd := &ix.nodes[n]
		for p := nd.lo; p < nd.hi; p++ {
			if ix.files[p].size > 0 && ix.freed(p, in) {
				out = append(out, p)
			}
		}
	}
	return out
}

// freed reports whether removing the files at the positions in frees
// the inode of the file at p, counted at its first name: every other
// name of it is in as well.
func (ix *index) freed(p int32, in func(int32) bool) bool {
	fl := &ix.files[p]
	for _, q := range ix.where(fl.content) {
		o := &ix.files[q]
		if q == p || o.dev != fl.dev || o.ino != fl.ino {
			continue
		}
		if !in(q) || q < p {
			return false
		}
	}
	return true
}

// surveyed is what the surveys of the contents of some files say:
// by content, 1 + where its survey is in svs (0: not asked).
type surveyed struct {
	at  []int32
	svs []*store.Survey
}

func (s *surveyed) of(c uint32) *store.Survey { return s.svs[s.at[c]-1] }

// surveys asks src, once, for the surveys of the contents of the files
// at the positions freed lists, in digest order.
func (ix *index) surveys(src Source, freed [][]int32) (*surveyed, error) {
	type id struct {
		words [2]uint64
		c     uint32
	}
	s := &surveyed{at: make([]int32, len(ix.contents))}
	var ids []id
	for _, ps := range freed {
		for _, p := range ps {
			if c := ix.files[p].content; s.at[c] == 0 {
				ids = append(ids, id{ix.contents[c].words, c})
				s.at[c] = int32(len(ids))
			}
		}
	}
	slices.SortFunc(ids, func(a, b id) int {
		return cmp.Or(cmp.Compare(a.words[0], b.words[0]), cmp.Compare(a.words[1], b.words[1]))
	})
	cs := make([]store.Content, len(ids))
	for i, x := range ids {
		cs[i] = store.Content{Backend: ix.contents[x.c].backend, Digest: ix.digest(x.c)}
		s.at[x.c] = int32(i + 1)
	}
	var err error
	s.svs, err = src.Surveys(cs)
	return s, err
}

// alone sums what the inodes of the files at positions ps hold alone,
// by their contents' surveys; unsurveyed counts those the surveys do not
// know (their size when the content has no survey, else nothing).
func (ix *index) alone(ps []int32, surveys *surveyed) (n int64, unsurveyed int) {
	for _, p := range ps {
		fl := &ix.files[p]
		sv := surveys.of(fl.content)
		if sv == nil {
			n += fl.size
			unsurveyed++
			continue
		}
		if i := sv.Find(fl.dev, fl.ino); i >= 0 && sv.Inodes[i].Known {
			n += sv.Inodes[i].Alone
		} else {
			unsurveyed++
		}
	}
	return n, unsurveyed
}
