package indexer

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// dropCase makes a tree under root in which p is indexed, then takes p
// away (gone) and brings it back with records the index holds (back),
// telling the indexer as the watcher would.
type dropCase struct {
	name string
	make func(t *testing.T, root, p string) (gone func(), back func(e *env))
}

var dropCases = []dropCase{
	{"directory renamed in", func(t *testing.T, root, p string) (func(), func(*env)) {
		x := filepath.Join(root, "x")
		writeOld(t, filepath.Join(p, "old.txt"), "the old p")
		writeOld(t, filepath.Join(x, "a.txt"), "file a")
		writeOld(t, filepath.Join(x, "b.txt"), "file b")
		return func() { must(t, os.RemoveAll(p)) }, func(e *env) {
			must(t, os.Rename(x, p))
			e.ix.Moved(context.Background(), x, p)
		}
	}},
	{"directory back from outside the roots", func(t *testing.T, root, p string) (func(), func(*env)) {
		writeOld(t, filepath.Join(p, "a.txt"), "file a")
		writeOld(t, filepath.Join(p, "b.txt"), "file b")
		out := filepath.Join(t.TempDir(), "p")
		return func() { must(t, os.Rename(p, out)) }, func(e *env) {
			must(t, os.Rename(out, p))
			e.ix.Rescan(p)
		}
	}},
}

// A directory found gone can be back before its records are dropped, and
// what brings it back does not wait for the checker that found it gone: a
// rename to its name moves records in (Moved), and a walk of it (Rescan)
// finds them current and writes nothing. The drop must spare them. The
// hook puts the return and the walk exactly between the checker's second
// look and its delete: no file may be lost, and none hashed again.
func TestDropSparesRecordsBroughtBack(t *testing.T) {
	for _, tc := range dropCases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			p := filepath.Join(root, "p")
			gone, back := tc.make(t, root, p)
			e := newEnv(t, root, envOpts{noWatch: true})
			e.settle(settleTimeout)
			before := e.h.snapshot()
			ran := hookDrop(t, p, func() {
				scans := e.ix.Progress().ScansCompleted
				back(e)
				waitFor(t, "the walk of p brought back", func() bool { return e.ix.Progress().ScansCompleted > scans })
			})
			gone()
			e.ix.Changed(context.Background(), p)
			e.settle(settleTimeout)
			if !*ran {
				t.Fatal("the drop of the gone directory never ran")
			}
			if hashed := e.h.hashedSince(before); len(hashed) != 0 {
				t.Errorf("hashed %v; the records brought back should have been kept", hashed)
			}
		})
	}
}

// hookDrop runs fn once, in the drop of path, between its second look and
// its delete; the flag says whether it ran.
func hookDrop(t *testing.T, path string, fn func()) *bool {
	var once sync.Once
	ran := new(bool)
	testHookBeforeDrop = func(p string) {
		if p == path {
			once.Do(func() { *ran = true; fn() })
		}
	}
	t.Cleanup(func() { testHookBeforeDrop = nil })
	return ran
}

// A directory renamed into a tree while the tree is walked arrives after
// the walk read its parent, with records of older generations; a walk of
// its new name, run meanwhile, finds them current and writes nothing. The
// first walk's sweep must not take them for files that vanished.
func TestSweepSparesDirectoryMovedInDuringWalk(t *testing.T) {
	root := t.TempDir()
	x, moved := filepath.Join(root, "x"), filepath.Join(root, "in", "new")
	writeOld(t, filepath.Join(x, "a.txt"), "file a")
	writeOld(t, filepath.Join(x, "b.txt"), "file b")
	writeOld(t, filepath.Join(root, "in", "keep.txt"), "kept")
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	late := filepath.Join(root, "late.txt") // held in hashing: the walk of root waits for it
	writeFile(t, late, "new")
	entered, release := e.h.hold(late)
	ctx := context.Background()
	scans := e.ix.Progress().ScansCompleted
	e.ix.Rescan(root)
	<-entered
	must(t, os.Rename(x, moved))
	e.ix.Moved(ctx, x, moved)
	waitFor(t, "the walk of the moved directory", func() bool { return e.ix.Progress().ScansCompleted > scans })
	close(release)
	e.settle(settleTimeout)
	if n := e.h.count(filepath.Join(moved, "a.txt")); n != 0 {
		t.Errorf("the moved a.txt was hashed %d times; its record should have stayed", n)
	}
}

// A directory replaced by a symlink to one with the same files: the walk
// does not follow the symlink, and the sweep drops the records under it,
// though a path through the symlink still reaches a file of that name.
func TestSweepDropsRecordsBehindASymlink(t *testing.T) {
	root := t.TempDir()
	d := filepath.Join(root, "d")
	writeOld(t, filepath.Join(d, "a.txt"), "file a")
	writeOld(t, filepath.Join(root, "b.txt"), "file b") // a root walked empty sweeps nothing
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	elsewhere := filepath.Join(t.TempDir(), "d")
	must(t, os.Rename(d, elsewhere))
	must(t, os.Symlink(elsewhere, d))
	e.ix.Rescan(root)
	e.settle(settleTimeout) // fails on the record of d/a.txt if it stays
	if _, ok, _ := e.st.Get([]byte(filepath.Join(d, "a.txt"))); ok {
		t.Error("the record of d/a.txt, reached only through a symlink now, is still there")
	}
}

// Files the configuration ignores since the last run keep existing, but a
// root's sweep drops their records: the walk skips them, and so does the
// sweep's look at what is still there.
func TestSweepDropsRecordsOfFilesIgnoredNow(t *testing.T) {
	root := t.TempDir()
	writeOld(t, filepath.Join(root, "a.txt"), "kept")
	tmp := filepath.Join(root, "sub", "b.tmp")
	writeOld(t, tmp, "ignored from the next start on")
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	e.stop()
	e.start(envOpts{noWatch: true, opts: Options{Ignore: []string{"*.tmp"}}})
	waitFor(t, "the record of the ignored file dropped", func() bool {
		_, ok, err := e.st.Get([]byte(tmp))
		return err == nil && !ok
	})
	if _, ok, _ := e.st.Get([]byte(filepath.Join(root, "a.txt"))); !ok {
		t.Error("the record of a.txt went too")
	}
}
