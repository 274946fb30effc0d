package indexer

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A file written through one of its hard links: the other name's record
// must not keep the old digest once the daemon is idle.
func TestHardlinkWrittenThroughOtherName(t *testing.T) {
	e, a, _ := linkedPair(t)
	writeFile(t, a, "new content, written through one name")
	time.Sleep(100 * time.Millisecond)
	e.settle(settleTimeout)
}

// Two hard links, one rewritten with its mtime set back; once that settled,
// the rewritten name is removed and the other renamed: the renamed file
// must be hashed, not given the other name's record from before the write.
func TestHardlinkRewrittenThenRemovedAndOtherRenamed(t *testing.T) {
	e, a, b := linkedPair(t)
	rewriteKeepMtime(t, a)
	waitHashed(t, e, a, 1)
	time.Sleep(200 * time.Millisecond)
	must(t, os.Remove(a))
	time.Sleep(600 * time.Millisecond) // a's record is dropped
	must(t, os.Rename(b, filepath.Join(e.root, "b/m.txt")))
	time.Sleep(100 * time.Millisecond)
	e.settle(settleTimeout)
}

// waitHashed waits until p was hashed more than n times.
func waitHashed(t *testing.T, e *env, p string, n int) {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for e.h.count(p) <= n {
		if time.Now().After(deadline) {
			t.Fatalf("%s was not hashed again", p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// linkedPair indexes a tree holding one file under two names, a and b.
func linkedPair(t *testing.T) (e *env, a, b string) {
	root := t.TempDir()
	a, b = filepath.Join(root, "a/f.txt"), filepath.Join(root, "b/l.txt")
	writeOld(t, a, "original content of the linked file")
	must(t, os.MkdirAll(filepath.Dir(b), 0o755))
	must(t, os.Link(a, b))
	e = newEnv(t, root, envOpts{})
	e.settle(settleTimeout)
	return e, a, b
}

// A write through a hard link leaves the records of its other names outside
// the roots (kept from an older configuration) alone.
func TestHardlinkWrittenLeavesOutsideRecords(t *testing.T) {
	e, a, _ := linkedPair(t)
	out := filepath.Join(t.TempDir(), "outside.txt")
	must(t, os.Link(a, out))
	rec, ok, err := e.st.Get([]byte(a))
	if err != nil || !ok {
		t.Fatalf("no record of %s: %v", a, err)
	}
	must(t, e.st.Put(context.Background(), []byte(out), rec))
	writeFile(t, a, "new content, written through one name")
	time.Sleep(100 * time.Millisecond)
	e.settle(settleTimeout)
	got, ok, err := e.st.Get([]byte(out))
	if err != nil || !ok || got.HashedAt != rec.HashedAt {
		t.Errorf("the record outside the roots was touched: %v %v (hashed at %d, was %d)", ok, err, got.HashedAt, rec.HashedAt)
	}
}
