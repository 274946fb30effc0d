package indexer

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/annexd/annexd/store"
)

// A record whose identity still matches but whose digest does not (what
// the kernel's compare tells dedup) is left alone by Changed and hashed
// again by Rehash, also when the path is in the pipeline at that moment.
// Nothing saw a write and the stat identity, ctime included, is the
// record's: the bytes are corrupt, and the record keeps its digest.
func TestRehashHashesALookingCurrentRecord(t *testing.T) {
	r := t.TempDir()
	p := filepath.Join(r, "f.dat")
	writeOld(t, p, "the real content")
	e := newEnv(t, r, envOpts{})
	e.settle(settleTimeout)
	rec, ok, err := e.st.Get([]byte(p))
	if err != nil || !ok {
		t.Fatalf("record of %s: %v %v", p, ok, err)
	}
	good := bytes.Clone(rec.Digest)
	rec.Digest = bytes.Repeat([]byte{0xee}, len(good))
	must(t, e.st.Put(context.Background(), []byte(p), rec))

	ctx := context.Background()
	before := e.h.count(p)
	e.ix.Changed(ctx, p)
	waitFor(t, "Changed settles", e.ix.Idle)
	if n := e.h.count(p); n != before {
		t.Fatalf("Changed hashed a record that looks current %d times", n-before)
	}
	entered, release := e.h.hold(p)
	e.ix.Rehash(p)
	select {
	case <-entered:
	case <-time.After(settleTimeout):
		t.Fatal("Rehash did not hash the file")
	}
	e.ix.Rehash(p) // while it is being hashed: one more hash after this one
	close(release)
	e.kept = map[string][]byte{p: rec.Digest}
	e.settle(settleTimeout)
	if n := e.h.count(p) - before; n != 2 {
		t.Errorf("Rehash hashed %d times, want 2", n)
	}
	got, _, _ := e.st.Get([]byte(p))
	if !bytes.Equal(got.Digest, rec.Digest) || got.State != store.StateCorrupt {
		t.Errorf("after Rehash: %v %x, want corrupt with the recorded %x", got.State, got.Digest, rec.Digest)
	}
	if k := e.found.kinds()[p]; len(k) == 0 || k[0] != FoundCorrupt {
		t.Errorf("found %v, want corrupt", k)
	}
}
