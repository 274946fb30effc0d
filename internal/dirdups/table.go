package dirdups

// table finds a content's id by its words: open addressing with linear
// probing. The words are digest bytes, uniform already, so the low bits
// of the first one are the hash. About four times faster than a map here.
type table struct {
	slots []uint32 // content id + 1; 0 is empty
	mask  uint64
	n     int
}

// newTable makes a table for about n contents.
func newTable(n int) *table {
	size := 1024
	for size < 2*n {
		size *= 2
	}
	return &table{slots: make([]uint32, size), mask: uint64(size - 1)}
}

// find returns the slot of w: holding its id, or empty.
func (t *table) find(w [2]uint64, contents []content) int {
	for i := w[0] & t.mask; ; i = (i + 1) & t.mask {
		s := t.slots[i]
		if s == 0 || contents[s-1].words == w {
			return int(i)
		}
	}
}

// put sets slot i to id c, growing the table when half full.
func (t *table) put(i int, c uint32, contents []content) {
	t.slots[i] = c + 1
	if t.n++; 2*t.n <= len(t.slots) {
		return
	}
	old := t.slots
	t.slots, t.mask = make([]uint32, 2*len(old)), uint64(2*len(old)-1)
	for _, s := range old {
		if s != 0 {
			t.slots[t.find(contents[s-1].words, contents)] = s
		}
	}
}
