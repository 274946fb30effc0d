package indexer

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/annexd/annexd/store"
)

// rewriteKeepMtime overwrites the start of p with other bytes of the same
// length and sets its mtime back, as rsync --inplace or a careless tool
// does: only ctime shows the change.
func rewriteKeepMtime(t *testing.T, p string) {
	t.Helper()
	st, err := os.Stat(p)
	must(t, err)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("REWRITTEN"), 0)
	must(t, err)
	must(t, f.Close())
	must(t, os.Chtimes(p, st.ModTime(), st.ModTime()))
}

// Two hard links to one file, rewritten while the daemon was down (the
// mtime set back): neither name may take the other's record, whose ctime
// is older than the inode's, and nothing saw the write, so both keep the
// old key, flagged, and are reported changed without a trace.
func TestHardlinkRewrittenWhileDown(t *testing.T) {
	root := t.TempDir()
	f, l := filepath.Join(root, "a/f.txt"), filepath.Join(root, "b/l.txt")
	writeOld(t, f, "original content of the linked file")
	must(t, os.MkdirAll(filepath.Dir(l), 0o755))
	must(t, os.Link(f, l))
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	e.stop()
	rewriteKeepMtime(t, f)
	e.keep(f, "original content of the linked file")
	e.keep(l, "original content of the linked file")
	e.start(envOpts{noWatch: true})
	e.settle(settleTimeout)
	for _, p := range []string{f, l} {
		if k := e.found.kinds()[p]; len(k) != 1 || k[0] != FoundUntraced {
			t.Errorf("%s: found %v, want changed without a trace once", p, k)
		}
	}
}

// A hard link whose directory is moved right after the other name was
// rewritten (before that write settled) must not take the other name's
// stale record.
func TestHardlinkMovedRightAfterRewrite(t *testing.T) {
	e := newEnv(t, "", envOpts{})
	f, l := filepath.Join(e.root, "a/f.txt"), filepath.Join(e.root, "b/l.txt")
	writeOld(t, f, "original content of the linked file")
	must(t, os.MkdirAll(filepath.Dir(l), 0o755))
	must(t, os.Link(f, l))
	e.settle(settleTimeout)
	rewriteKeepMtime(t, f)
	must(t, os.Rename(filepath.Join(e.root, "b"), filepath.Join(e.root, "c")))
	time.Sleep(100 * time.Millisecond)
	e.settle(settleTimeout)
}

// A file rewritten in place (mtime set back) and renamed before the write
// settled must be hashed under its new name, not given the old record.
func TestRenameRightAfterRewrite(t *testing.T) {
	e := newEnv(t, "", envOpts{})
	f := filepath.Join(e.root, "f.txt")
	writeOld(t, f, "original content of the file")
	e.settle(settleTimeout)
	rewriteKeepMtime(t, f)
	must(t, os.Rename(f, filepath.Join(e.root, "g.txt")))
	e.settle(settleTimeout)
}

// A file rewritten in place (mtime set back), whose write settled and is
// waiting to be hashed, then renamed: the new name must not take the old,
// stale record while the old name's hash is still pending.
func TestRenameWhileRewriteQueued(t *testing.T) {
	e := newEnv(t, "", envOpts{})
	f, g := filepath.Join(e.root, "f.txt"), filepath.Join(e.root, "g.txt")
	writeOld(t, f, "original content of the file")
	e.settle(settleTimeout)
	entered, release := e.h.hold(f)
	rewriteKeepMtime(t, f)
	select {
	case <-entered:
	case <-time.After(settleTimeout):
		t.Fatal("the rewrite was never hashed")
	}
	must(t, os.Rename(f, g))
	deadline := time.Now().Add(settleTimeout)
	for e.h.count(g) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	e.settle(settleTimeout)
	if e.h.count(g) == 0 {
		t.Error("g was never hashed")
	}
}

// A hard link renamed right after the other name was rewritten (mtime set
// back), while that name's hash is still waiting, must not keep its record:
// the rename changed its ctime anyway, so only its having other names tells
// that the inode may have been written.
func TestHardlinkRenamedRightAfterRewrite(t *testing.T) {
	e := newEnv(t, "", envOpts{})
	l := filepath.Join(e.root, "l.txt") // indexed first: its record is the one found by inode
	writeOld(t, l, "original content of the linked file")
	e.settle(settleTimeout)
	f := filepath.Join(e.root, "z/f.txt")
	must(t, os.MkdirAll(filepath.Dir(f), 0o755))
	must(t, os.Link(l, f))
	e.settle(settleTimeout)
	entered, release := e.h.hold(f)
	rewriteKeepMtime(t, f)
	<-entered
	l2 := filepath.Join(e.root, "l2.txt")
	must(t, os.Rename(l, l2))
	deadline := time.Now().Add(settleTimeout)
	for e.h.count(l2) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	e.settle(settleTimeout)
}

// A file found changed without a trace keeps that class when it is
// hashed again with nothing changed since (dedup's Rehash, say): its
// record took the ctime the finding met, so the stat alone would now say
// corrupt, which tells the user their disk rots and lets a heal restore
// old bytes over what may be their own edit.
func TestUntracedHashedAgain(t *testing.T) {
	root := t.TempDir()
	f := filepath.Join(root, "f.txt")
	writeOld(t, f, "the bytes first indexed")
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	e.stop()
	rewriteKeepMtime(t, f)
	e.keep(f, "the bytes first indexed")
	e.start(envOpts{noWatch: true})
	e.settle(settleTimeout)
	e.ix.Rehash(f)
	e.settle(settleTimeout)
	if k := e.found.kinds()[f]; len(k) != 2 || k[0] != FoundUntraced || k[1] != FoundUntraced {
		t.Errorf("found %v, want changed without a trace, twice", k)
	}
	if r, _, err := e.st.Get([]byte(f)); err != nil || r.State != store.StateUntraced {
		t.Errorf("record state %v (%v), want untraced", r.State, err)
	}
	res, err := e.ix.Lookup(context.Background(), f, false)
	if err != nil || res.State != Untraced {
		t.Errorf("Lookup = %+v, %v; want untraced", res, err)
	}
}
