package indexer

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/store"
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

// A rewrite through one hard link (the mtime set back) whose event the
// watcher reads only after that name's directory has moved: the watcher
// cannot stat the old path, so the ledger has the write by path with no
// inode. The written name takes the new key; its other name, outside the
// moved directory, is the same file and must too: an edit, never a
// finding.
func TestHardlinkEditSeenAfterItsDirectoryMoved(t *testing.T) {
	e, a := editBehindMovedLink(t, nil)
	e.settle(settleTimeout)
	if k := e.found.kinds(); len(k) != 0 {
		t.Errorf("findings %v for an edit through a watched name", k)
	}
	if rec, _, _ := e.st.Get([]byte(a)); rec.State != store.StateOK {
		t.Errorf("%s: state %v after an edit through its other name", a, rec.State)
	}
}

// A finding made on a file too early, before the ledger had the write
// through its other name (as TestHardlinkEditSeenAfterItsDirectoryMoved
// makes it), took the file's ctime with the old key. Once that write is
// seen, the finding gives way: the file is hashed and takes the new key.
func TestEarlyFindingGivesWayToEditThroughLink(t *testing.T) {
	e, a := editBehindMovedLink(t, func(e *env, a string) {
		rec, ok, err := e.st.Get([]byte(a))
		if err != nil || !ok {
			t.Fatalf("no record of %s: %v", a, err)
		}
		fi, err := fsstat.Lstat(a)
		must(t, err)
		var now store.Record
		now.SetIdentity(identity(fi))
		must(t, e.st.Put(context.Background(), []byte(a), kept(rec, now, keepUntraced)))
	})
	e.settle(settleTimeout)
	if rec, _, _ := e.st.Get([]byte(a)); rec.State != store.StateOK {
		t.Errorf("%s: state %v after an edit through its other name", a, rec.State)
	}
}

// editBehindMovedLink indexes a file a with a hard link two directories
// down, rewrites the link (the mtime set back) while the watcher reads
// nothing, and moves the link's directory before the watcher reads on:
// the watcher then has the write by the link's old path alone. early, if
// set, runs before the watcher reads on.
func editBehindMovedLink(t *testing.T, early func(e *env, a string)) (*env, string) {
	e, a, b := linkedPair(t) // b is root/b/l.txt
	old := filepath.Join(e.root, "b")
	sub := filepath.Join(old, "sub")
	must(t, os.MkdirAll(sub, 0o755))
	bb := filepath.Join(sub, "l.txt")
	must(t, os.Rename(b, bb))
	e.settle(settleTimeout)
	e.blockWatcher()
	rewriteKeepMtime(t, bb)
	must(t, os.Rename(old, filepath.Join(e.root, "moved")))
	if early != nil {
		early(e, a)
	}
	e.pause <- false
	return e, a
}

// As TestHardlinkEditSeenAfterItsDirectoryMoved, with the written name
// removed instead of moved before the watcher reads the write: its record
// is dropped before the other name is judged, which still hears of the
// write through it.
func TestHardlinkEditSeenAfterItsNameRemoved(t *testing.T) {
	e, a, b := linkedPair(t)
	e.blockWatcher()
	rewriteKeepMtime(t, b)
	must(t, os.Remove(b))
	entered, release := e.h.hold(a)
	e.pause <- false
	select {
	case <-entered:
	case <-time.After(settleTimeout):
		t.Fatal("the other name was never hashed")
	}
	waitFor(t, "the removed name's record is dropped", func() bool {
		_, ok, err := e.st.Get([]byte(b))
		return err == nil && !ok
	})
	close(release)
	e.settle(settleTimeout)
	if k := e.found.kinds(); len(k) != 0 {
		t.Errorf("findings %v for an edit through a watched name", k)
	}
	if rec, _, _ := e.st.Get([]byte(a)); rec.State != store.StateOK {
		t.Errorf("%s: state %v after an edit through its other name", a, rec.State)
	}
}
