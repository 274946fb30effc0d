package dirdups

// contain reports a, when another folder holds every content of a, with
// the smallest such folder.
func (f *finder) contain(a int32) {
	ix := f.ix
	na := &ix.nodes[a]
	if na.minOcc < 2 || !f.countMult(a) {
		return
	}
	best := int32(-1)
	for _, p := range ix.where(f.rarest(a)) {
		if p >= na.lo && p < na.hi {
			continue
		}
		if b := f.containerAbove(a, ix.files[p].node); b >= 0 && (best < 0 || ix.nodes[b].count < ix.nodes[best].count) {
			best = b
		}
	}
	if best >= 0 {
		f.cover(a)
		f.found = append(f.found, finding{kind: Contained, nodes: []int32{best, a}})
	}
}

// multiset counts the files of each content of one folder: an array by
// content (a map costs several times more at 10^6 files), and the
// contents set, to clear and to walk.
type multiset struct {
	count []int32 // by content
	set   []uint32
}

func (m *multiset) reset() {
	for _, c := range m.set {
		m.count[c] = 0
	}
	m.set = m.set[:0]
}

func (m *multiset) add(c uint32) {
	if m.count[c] == 0 {
		m.set = append(m.set, c)
	}
	m.count[c]++
}

// countMult fills f.mult with how many files of each content a holds,
// and reports whether the index holds at least as many outside a.
func (f *finder) countMult(a int32) bool {
	f.mult.reset()
	na := &f.ix.nodes[a]
	for _, fl := range f.ix.files[na.lo:na.hi] {
		f.mult.add(fl.content)
	}
	for _, c := range f.mult.set {
		if m := f.mult.count[c]; f.ix.contents[c].occ-m < m {
			return false
		}
	}
	return true
}

// rarest returns the content of a with the fewest files in the index.
func (f *finder) rarest(a int32) uint32 {
	best, occ := uint32(0), int32(-1)
	for _, c := range f.mult.set {
		if o := f.ix.contents[c].occ; occ < 0 || o < occ {
			best, occ = c, o
		}
	}
	return best
}

// containerAbove walks up from node d, outside a, and returns the first
// folder that holds every content of a (f.mult), or -1. Folders above a
// hold a already and end the walk; so does a folder looked at before for
// a, as the walk from it went on above it then.
func (f *finder) containerAbove(a, d int32) int32 {
	ix := f.ix
	for x := d; x >= 0 && !ix.below(a, x); x = ix.nodes[x].parent {
		if f.stamp[x] == a+1 {
			return -1
		}
		f.stamp[x] = a + 1
		if f.holds(x, a) {
			return x
		}
	}
	return -1
}

// holds reports whether folder x may be named as holding a: in scope,
// not removable itself, bigger, and with every content of a as many
// times in files not reported removable already. Relying only on those,
// every content keeps a copy however many reports one follows.
func (f *finder) holds(x, a int32) bool {
	nx, na := &f.ix.nodes[x], &f.ix.nodes[a]
	if !f.scope[x] || f.covered[x] || nx.count <= na.count || nx.bytes < na.bytes {
		return false
	}
	for _, c := range f.mult.set {
		if m := f.mult.count[c]; f.keptIn(c, nx.lo, nx.hi, m) < m {
			return false
		}
	}
	return true
}

// keptIn counts, up to m, the files of content c among positions
// [lo, hi) that are not in a folder reported removable.
func (f *finder) keptIn(c uint32, lo, hi, m int32) int32 {
	n := int32(0)
	for _, p := range f.ix.within(c, lo, hi) {
		if !f.covered[f.ix.files[p].node] {
			if n++; n == m {
				break
			}
		}
	}
	return n
}
