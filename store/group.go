package store

// A group commit rewrites every tree node its changes touch, and each such
// node stays in memory, with a page-sized copy for the write, until the
// commit. Once the index is large, random inserts into the digest and
// inode indexes touch a new leaf for almost every change. So the writer
// bounds a group by the nodes its last commit touched, not only by
// Options.MaxBatch. Measured on a first scan of 10^6 files under a 96 MiB
// soft memory limit (the daemon's then; 64 MiB since): fixed groups of
// 4,096 took 127 CPU-s with a 120 MB peak heap (the collector ran without
// pause), groups bounded by 2,048 nodes took 57 CPU-s and 76 MB; the
// corpus's 60,000 files keep their groups of 4,096 (BENCHMARKS.md).

// DefaultMaxGroupNodes is Options.MaxGroupNodes unless set.
const DefaultMaxGroupNodes = 2048

// minGroup is the smallest group the node bound shrinks to.
const minGroup = 64

// groupSize is the writer's current cap on a group's changes: halved when
// a commit touched more than maxNodes nodes, doubled back toward maxBatch
// when a full group touched fewer than half as many.
type groupSize struct {
	n, maxBatch int
	maxNodes    int64
}

func newGroupSize(maxBatch, maxNodes int) groupSize {
	return groupSize{n: maxBatch, maxBatch: maxBatch, maxNodes: int64(maxNodes)}
}

// committed adapts the cap to a commit of changes that touched nodes.
func (g *groupSize) committed(changes int, nodes int64) {
	switch {
	case nodes > g.maxNodes && g.n > minGroup:
		g.n = max(g.n/2, minGroup)
	case nodes < g.maxNodes/2 && changes >= g.n && g.n < g.maxBatch:
		g.n = min(2*g.n, g.maxBatch)
	}
}
