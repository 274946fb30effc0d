package store

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestKeyBufMatchesAMap holds keyBuf to the map it replaced: random adds
// (with repeated keys and values) and removals, then the entries it writes
// must be the map's, in key order, once each.
func TestKeyBufMatchesAMap(t *testing.T) {
	var b keyBuf
	for round := range 200 {
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		model := map[string][]byte{}
		keys := 1 + rng.IntN(40)
		for op := range rng.IntN(300) {
			k := []byte(fmt.Sprintf("k%03d", rng.IntN(keys)))
			if round%2 == 0 && rng.IntN(3) == 0 { // odd rounds only add
				_, had := model[string(k)]
				delete(model, string(k))
				if got := b.remove(k); got != had {
					t.Fatalf("round %d op %d: remove(%s) = %v, the map had it: %v", round, op, k, got, had)
				}
				continue
			}
			v := []byte(fmt.Sprint(op))
			model[string(k)] = v
			b.add(k, v)
		}
		if got := b.empty(); got != (len(model) == 0) {
			t.Fatalf("round %d: empty() = %v, the map holds %d", round, got, len(model))
		}
		var gotKeys []string
		err := b.each(func(k, v []byte) error {
			if string(v) != string(model[string(k)]) {
				t.Errorf("round %d: %s → %s, the map says %s", round, k, v, model[string(k)])
			}
			gotKeys = append(gotKeys, string(k))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := slices.Sorted(maps.Keys(model)); !slices.Equal(gotKeys, want) {
			t.Fatalf("round %d: wrote %q, want %q", round, gotKeys, want)
		}
		if len(b.ents) != 0 || !b.empty() {
			t.Fatalf("round %d: each left %d entries", round, len(b.ents))
		}
	}
}

// TestKeyBufForgetsALargeTransaction: after a transaction of more entries
// than a group, reset gives their memory back, and it drops the values of
// the entries it keeps room for.
func TestKeyBufForgetsALargeTransaction(t *testing.T) {
	var b keyBuf
	for i := range 3 * keyBufKeep {
		b.add(fmt.Appendf(nil, "k%06d", i), []byte("v"))
	}
	b.reset()
	if cap(b.ents) != 0 || cap(b.arena) != 0 {
		t.Fatalf("after a large transaction reset keeps room for %d entries and %d key bytes", cap(b.ents), cap(b.arena))
	}
	b.add([]byte("k"), []byte("v"))
	b.reset()
	if cap(b.ents) == 0 {
		t.Fatal("reset gave back the memory of a small transaction")
	}
	if v := b.ents[:1][0].v; v != nil {
		t.Fatalf("reset keeps a value alive: %q", v)
	}
}
