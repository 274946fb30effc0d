package dirdups

import "slices"

// prepare numbers the nodes in preorder, puts the files in that order
// (a subtree's files are then one run), sums every subtree and lists
// where each content is.
func (ix *index) prepare() {
	ix.number()
	ix.sortFiles()
	ix.sum()
	ix.locate()
}

// number gives each node its preorder number (in) and the number after
// its subtree (out); order lists the nodes by in.
func (ix *index) number() {
	kids := make([][]int32, len(ix.nodes))
	var tops []int32
	for i := range ix.nodes {
		if p := ix.nodes[i].parent; p >= 0 {
			kids[p] = append(kids[p], int32(i))
		} else {
			tops = append(tops, int32(i))
		}
	}
	ix.order = make([]int32, 0, len(ix.nodes))
	var walk func(n int32)
	walk = func(n int32) {
		ix.nodes[n].in = int32(len(ix.order))
		ix.order = append(ix.order, n)
		for _, k := range kids[n] {
			walk(k)
		}
		ix.nodes[n].out = int32(len(ix.order))
	}
	for _, t := range tops {
		walk(t)
	}
}

// sortFiles puts the files in their nodes' preorder and sets each
// node's run of files (lo, hi).
func (ix *index) sortFiles() {
	start := make([]int32, len(ix.nodes)+1) // by preorder number
	for _, f := range ix.files {
		start[ix.nodes[f.node].in+1]++
	}
	for i := 1; i < len(start); i++ {
		start[i] += start[i-1]
	}
	sorted := make([]file, len(ix.files))
	next := slices.Clone(start)
	for _, f := range ix.files {
		in := ix.nodes[f.node].in
		sorted[next[in]] = f
		next[in]++
	}
	ix.files = sorted
	for i := range ix.nodes {
		n := &ix.nodes[i]
		n.lo, n.hi = start[n.in], start[n.out]
	}
}

// sum fills each node's figures from its subtree: children come after
// their parent in preorder, so a walk backwards adds each to its parent
// complete.
func (ix *index) sum() {
	for i := range ix.nodes {
		ix.nodes[i].minOcc = 1 << 30
	}
	for _, f := range ix.files {
		n, c := &ix.nodes[f.node], &ix.contents[f.content]
		n.count++
		n.bytes += f.size
		n.sig[0] += c.words[0]
		n.sig[1] += c.words[1]
		n.minOcc = min(n.minOcc, c.occ)
	}
	for i := len(ix.order) - 1; i >= 0; i-- {
		n := &ix.nodes[ix.order[i]]
		n.count += n.own
		n.unknown += n.own
		if n.parent < 0 {
			continue
		}
		p := &ix.nodes[n.parent]
		p.count += n.count
		p.unknown += n.unknown
		p.bytes += n.bytes
		p.sig[0] += n.sig[0]
		p.sig[1] += n.sig[1]
		p.minOcc = min(p.minOcc, n.minOcc)
	}
}

// locate lists, for each content, the positions in ix.files of the files
// holding it, in increasing order: where[c] is at[first[c]:first[c+1]].
func (ix *index) locate() {
	ix.first = make([]int32, len(ix.contents)+1)
	for _, f := range ix.files {
		ix.first[f.content+1]++
	}
	for i := 1; i < len(ix.first); i++ {
		ix.first[i] += ix.first[i-1]
	}
	ix.at = make([]int32, len(ix.files))
	next := slices.Clone(ix.first[:len(ix.contents)])
	for p, f := range ix.files {
		ix.at[next[f.content]] = int32(p)
		next[f.content]++
	}
}

// where returns the positions of content c's files.
func (ix *index) where(c uint32) []int32 { return ix.at[ix.first[c]:ix.first[c+1]] }

// within returns the positions of content c's files among [lo, hi).
func (ix *index) within(c uint32, lo, hi int32) []int32 {
	w := ix.where(c)
	a, _ := slices.BinarySearch(w, lo)
	b, _ := slices.BinarySearch(w, hi)
	return w[a:b]
}

// below reports whether node a is node b or in its subtree.
func (ix *index) below(a, b int32) bool {
	na, nb := &ix.nodes[a], &ix.nodes[b]
	return nb.in <= na.in && na.in < nb.out
}
