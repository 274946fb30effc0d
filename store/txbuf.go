package store

import (
	"bytes"
	"cmp"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// keyBuf collects the entries one transaction adds to a bucket and writes
// them in key order when the transaction ends (wtx.finish), so that they
// append to the bucket's last leaves instead of landing between entries
// put earlier in the same transaction; the schema-5 migration writes its
// one run through it too. Unlike a map from entry to value, it keeps the
// keys in one arena that the writer reuses from one transaction to the
// next (up to keyBufKeep of them), and builds an index by key only at the
// first removal while entries are buffered (a path put and changed again
// within one group, a verified entry replaced).
type keyBuf struct {
	arena []byte
	ents  []bufEntry
	at    map[string]int // key → its live entry in ents; nil until a removal
}

type bufEntry struct {
	off, n int
	v      []byte // bbolt keeps a reference to a value until the commit
	gone   bool
}

func (b *keyBuf) key(e *bufEntry) []byte { return b.arena[e.off : e.off+e.n] }

// keyBufKeep is the most entries whose memory a keyBuf keeps for the next
// transaction: twice the default group (Options.MaxBatch). One transaction
// that re-puts a large tree (a directory moved over another, move.go)
// would otherwise leave megabytes held for the life of the store.
const keyBufKeep = 8192

// reset forgets every entry, and the values they held; it keeps the
// memory of up to keyBufKeep entries.
func (b *keyBuf) reset() {
	clear(b.ents)
	if cap(b.ents) > keyBufKeep {
		*b = keyBuf{}
		return
	}
	b.arena, b.ents, b.at = b.arena[:0], b.ents[:0], nil
}

// add adds k → v (v is kept, not copied); a later add of the same key
// wins.
func (b *keyBuf) add(k, v []byte) {
	off := len(b.arena)
	b.arena = append(b.arena, k...)
	if b.at != nil {
		if i, ok := b.at[string(k)]; ok {
			b.ents[i].gone = true
		}
		b.at[string(k)] = len(b.ents)
	}
	b.ents = append(b.ents, bufEntry{off: off, n: len(k), v: v})
}

// remove removes the entry k added in this transaction, reporting
// whether there was one.
func (b *keyBuf) remove(k []byte) bool {
	if len(b.ents) == 0 {
		return false
	}
	if b.at == nil {
		b.at = make(map[string]int, len(b.ents))
		for i := range b.ents {
			e := &b.ents[i]
			if j, ok := b.at[string(b.key(e))]; ok {
				b.ents[j].gone = true
			}
			b.at[string(b.key(e))] = i
		}
	}
	i, ok := b.at[string(k)]
	if !ok {
		return false
	}
	b.ents[i].gone = true
	delete(b.at, string(k))
	return true
}

// empty reports whether no entry is left to write.
func (b *keyBuf) empty() bool {
	for i := range b.ents {
		if !b.ents[i].gone {
			return false
		}
	}
	return true
}

// each calls fn with every live entry in key order (of two adds of one key
// only the later), then forgets them all.
func (b *keyBuf) each(fn func(k, v []byte) error) error {
	defer b.reset()
	// Ties go by arena offset, which grows with every add: the order
	// of a stable sort, at the cost of an unstable one.
	slices.SortFunc(b.ents, func(x, y bufEntry) int {
		return cmp.Or(bytes.Compare(b.key(&x), b.key(&y)), cmp.Compare(x.off, y.off))
	})
	for i := 0; i < len(b.ents); {
		// The adds of one key are side by side, in the order they came.
		j, last := i, -1
		for ; j < len(b.ents) && bytes.Equal(b.key(&b.ents[i]), b.key(&b.ents[j])); j++ {
			if !b.ents[j].gone {
				last = j
			}
		}
		if last >= 0 {
			if err := fn(b.key(&b.ents[last]), b.ents[last].v); err != nil {
				return err
			}
		}
		i = j
	}
	return nil
}

// putSorted puts every live entry of buf into bucket, in key order, with
// its pages filled for appends.
func putSorted(bucket *bolt.Bucket, buf *keyBuf) error {
	if len(buf.ents) == 0 {
		return nil
	}
	bucket.FillPercent = appendFill
	return buf.each(bucket.Put) // bbolt copies keys
}
