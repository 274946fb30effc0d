package indexer

import (
	"testing"

	"github.com/annexd/annexd/store"
)

// TestDecideFile covers what a regular file's check does with each set of
// facts, with no store and no file system.
func TestDecideFile(t *testing.T) {
	held := fileFacts{rec: store.Record{State: store.StateOK}, ok: true, settled: true, mayAdopt: true}
	none := fileFacts{mayAdopt: true}
	sh := store.Record{State: store.StateOK}
	with := func(f fileFacts, change func(*fileFacts)) fileFacts {
		change(&f)
		return f
	}
	tests := []struct {
		name string
		f    fileFacts
		want fileStep
	}{
		{"record settled", held, stepSettle},
		{"record settled, read with a device number", with(held, func(f *fileFacts) { f.legacy = true }), stepUpgrade},
		{"record not settled", with(held, func(f *fileFacts) { f.settled = false }), stepHash},
		{"record settled, written since", with(held, func(f *fileFacts) { f.seen = true }), stepHash},
		{"record settled, Rehash asked", with(held, func(f *fileFacts) { f.rehash = true }), stepHash},
		{"legacy record, written since", with(held, func(f *fileFacts) { f.legacy, f.seen = true, true }), stepHash},
		{"no record", none, stepAdopt},
		{"no record, a walk into an empty index", with(none, func(f *fileFacts) { f.mayAdopt = false }), stepHash},
		{"no record, Rehash asked", with(none, func(f *fileFacts) { f.rehash = true }), stepAdopt},
		{"no record, its disk's shelved record fits", with(none, func(f *fileFacts) { f.shelf = &sh }), stepUnshelve},
		{"another disk's record, the shelved one fits",
			with(none, func(f *fileFacts) { f.other, f.shelf = true, &sh }), stepUnshelve},
		{"another disk's record, none shelved", with(none, func(f *fileFacts) { f.other = true }), stepAdopt},
		{"another disk's record, an empty index", with(none, func(f *fileFacts) { f.other, f.mayAdopt = true, false }), stepHash},
	}
	for _, tc := range tests {
		if got := decideFile(tc.f); got != tc.want {
			t.Errorf("%s: decideFile = %v, want %v", tc.name, got, tc.want)
		}
	}
}
