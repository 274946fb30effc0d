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
	r := reclaimer{ix: f.ix, src: src, surveys: map[uint32]*store.Survey{}}
	var out []Report
	for _, fd := range f.found {
		if !f.asked(fd.nodes...) {
			continue
		}
		rep := Report{Kind: fd.kind}
		for _, n := range fd.nodes {
			nd := &f.ix.nodes[n]
			rep.Folders = append(rep.Folders, Folder{Path: nd.path, Files: nd.count, Bytes: nd.bytes})
		}
		var err error
		if rep.Reclaimable, rep.Unsurveyed, err = r.reclaimable(fd.nodes[1:]); err != nil {
			return nil, err
		}
		out = append(out, rep)
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

// reclaimer counts what removing folders gives back.
type reclaimer struct {
	ix      *index
	src     Source
	surveys map[uint32]*store.Survey // by content; nil: none
}

// reclaimable sums, over the inodes whose every name is in the subtrees
// of drop, what each holds alone (its size when not surveyed).
func (r *reclaimer) reclaimable(drop []int32) (bytes int64, unsurveyed int, err error) {
	in := func(p int32) bool {
		for _, n := range drop {
			if nd := &r.ix.nodes[n]; p >= nd.lo && p < nd.hi {
				return true
			}
		}
		return false
	}
	for _, n := range drop {
		nd := &r.ix.nodes[n]
		for p := nd.lo; p < nd.hi; p++ {
			if !r.freed(p, in) {
				continue
			}
			b, known, err := r.alone(p)
			if err != nil {
				return 0, 0, err
			}
			bytes += b
			if !known {
				unsurveyed++
			}
		}
	}
	return bytes, unsurveyed, nil
}

// freed reports whether removing the files in (positions) frees the
// inode of the file at p, counted at its first name: every other name of
// it is in as well.
func (r *reclaimer) freed(p int32, in func(int32) bool) bool {
	fl := &r.ix.files[p]
	for _, q := range r.ix.where(fl.content) {
		o := &r.ix.files[q]
		if q == p || o.dev != fl.dev || o.ino != fl.ino {
			continue
		}
		if !in(q) || q < p {
			return false
		}
	}
	return true
}

// alone returns the bytes the file at p holds alone, by its content's
// survey; known is false when the survey does not know its inode (then
// its size, when the content has no survey at all).
func (r *reclaimer) alone(p int32) (n int64, known bool, err error) {
	fl := &r.ix.files[p]
	if fl.size == 0 {
		return 0, true, nil
	}
	sv, ok := r.surveys[fl.content]
	if !ok {
		c := &r.ix.contents[fl.content]
		if sv, err = r.src.Survey(c.backend, r.ix.digest(fl.content)); err != nil {
			return 0, false, err
		}
		r.surveys[fl.content] = sv
	}
	if sv == nil {
		return fl.size, false, nil
	}
	if i := sv.Find(fl.dev, fl.ino); i >= 0 && sv.Inodes[i].Known {
		return sv.Inodes[i].Alone, true, nil
	}
	return 0, false, nil
}
