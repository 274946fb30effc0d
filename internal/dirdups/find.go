package dirdups

import (
	"bytes"
	"cmp"
	"context"
	"slices"
)

// Kind says what a Report means.
type Kind int

// The kinds of a Report.
const (
	// Identical: Folders hold the same contents.
	Identical Kind = iota + 1
	// Contained: every content of Folders[1] is in Folders[0] as well,
	// which holds more.
	Contained
)

// Folder is one folder of a report.
type Folder struct {
	Path  []byte
	Files int64 // files at any depth
	Bytes int64 // their bytes
}

// Report is one finding.
type Report struct {
	Kind Kind
	// Folders: the one kept first, then the extra copies (of an identical
	// group, in path order; the contained folder).
	Folders []Folder
	// Reclaimable is what removing the extra copies would give back, by
	// the rules of the package comment.
	Reclaimable int64
	// Unsurveyed counts the inodes counted at their size, as nothing is
	// known of their blocks.
	Unsurveyed int
}

// Unknown is a folder holding files with no key: neither it nor a folder
// above it was compared.
type Unknown struct {
	Path  []byte
	Files int64 // its own files with no key
}

// Options select what Find reports.
type Options struct {
	MinSize int64 // folders of fewer bytes are not reported (0 counts as 1)
	// InScope reports whether a folder may be reported or named as the
	// folder holding another (say, under the daemon's roots); nil: all.
	InScope func(path []byte) bool
	// Paths, if any: only reports with a folder at or below one of them,
	// and folders of unknown content at or below one.
	Paths [][]byte
}

// Result is what Find found.
type Result struct {
	Reports []Report  // most reclaimable bytes first
	Unknown []Unknown // path order
	Folders int       // folders read
	Files   int64     // files read
}

// Find reads the index from src once and reports its duplicate folders.
func Find(ctx context.Context, src Source, opts Options) (Result, error) {
	ix, err := load(ctx, src)
	if err != nil {
		return Result{}, err
	}
	ix.prepare()
	f := newFinder(ix, opts)
	f.run()
	reports, err := f.reports(src)
	if err != nil {
		return Result{}, err
	}
	res := Result{Reports: reports, Unknown: f.unknown(), Folders: len(ix.nodes), Files: int64(len(ix.files))}
	for _, n := range ix.nodes {
		res.Files += n.own
	}
	return res, nil
}

// finding is a report before its figures: the folders (node numbers),
// the one kept first.
type finding struct {
	kind  Kind
	nodes []int32
}

// finder decides which folders to report.
type finder struct {
	ix      *index
	opts    Options
	scope   []bool  // by node: InScope
	covered []bool  // by node: in the subtree of a folder reported as removable
	stamp   []int32 // by node: the last node whose containers were looked at here, +1
	groups  map[sigKey][]int32
	found   []finding
	mult    multiset // the contents of the folder looked at (contain.go)
}

// sigKey identifies a multiset of contents.
type sigKey struct {
	sig   [2]uint64
	count int64
}

func newFinder(ix *index, opts Options) *finder {
	opts.MinSize = max(opts.MinSize, 1)
	f := &finder{ix: ix, opts: opts, scope: make([]bool, len(ix.nodes)), covered: make([]bool, len(ix.nodes)),
		stamp: make([]int32, len(ix.nodes)), groups: map[sigKey][]int32{},
		mult: multiset{count: make([]int32, len(ix.contents))}}
	for i := range ix.nodes {
		f.scope[i] = opts.InScope == nil || opts.InScope(ix.nodes[i].path)
	}
	return f
}

// candidate reports whether node n may be reported as removable: in
// scope, wholly keyed, and big enough.
func (f *finder) candidate(n int32) bool {
	nd := &f.ix.nodes[n]
	return f.scope[n] && nd.unknown == 0 && nd.bytes >= f.opts.MinSize
}

// run visits the candidates biggest first: a folder holding another has
// more files, or the same ones and a lower depth, so it is decided first.
func (f *finder) run() {
	var cands []int32
	for i := range f.ix.nodes {
		if n := int32(i); f.candidate(n) {
			cands = append(cands, n)
			k := f.key(n)
			f.groups[k] = append(f.groups[k], n)
		}
	}
	nodes := f.ix.nodes
	slices.SortFunc(cands, func(a, b int32) int {
		return cmp.Or(cmp.Compare(nodes[b].count, nodes[a].count), cmp.Compare(nodes[a].depth, nodes[b].depth),
			bytes.Compare(nodes[a].path, nodes[b].path))
	})
	for _, n := range cands {
		if f.covered[n] {
			continue
		}
		if g := f.groups[f.key(n)]; len(g) > 1 {
			f.group(g)
			delete(f.groups, f.key(n))
		}
		if !f.covered[n] {
			f.contain(n)
		}
	}
}

func (f *finder) key(n int32) sigKey {
	return sigKey{sig: f.ix.nodes[n].sig, count: f.ix.nodes[n].count}
}

// cover marks n's subtree as reported removable.
func (f *finder) cover(n int32) {
	nd := &f.ix.nodes[n]
	for _, m := range f.ix.order[nd.in:nd.out] {
		f.covered[m] = true
	}
}

// group reports the members of one signature that are still open: not
// covered, not standing for the folder above them (which holds the same
// files), and the same multiset as the first, checked file by file.
func (f *finder) group(g []int32) {
	var open []int32
	for _, n := range g {
		p := f.ix.nodes[n].parent
		if f.covered[n] || p >= 0 && f.scope[p] && f.ix.nodes[p].count == f.ix.nodes[n].count {
			continue
		}
		open = append(open, n)
	}
	if len(open) < 2 {
		return
	}
	slices.SortFunc(open, func(a, b int32) int { return bytes.Compare(f.ix.nodes[a].path, f.ix.nodes[b].path) })
	first := f.ix.contentsOf(open[0])
	same := open[:1]
	for _, n := range open[1:] {
		if slices.Equal(first, f.ix.contentsOf(n)) {
			same = append(same, n)
		}
	}
	if len(same) < 2 {
		return
	}
	for _, n := range same[1:] {
		f.cover(n)
	}
	f.found = append(f.found, finding{kind: Identical, nodes: same})
}

// contentsOf returns the sorted contents of n's subtree.
func (ix *index) contentsOf(n int32) []uint32 {
	nd := &ix.nodes[n]
	out := make([]uint32, 0, nd.hi-nd.lo)
	for _, fl := range ix.files[nd.lo:nd.hi] {
		out = append(out, fl.content)
	}
	slices.Sort(out)
	return out
}
