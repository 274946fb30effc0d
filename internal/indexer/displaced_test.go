package indexer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"

	"github.com/annexd/annexd/store"
)

// A flagged file and another swap names while the daemon is stopped. The
// check of the flagged file's old name writes the other file's record
// over the flagged one; the finding must still follow the rotten bytes to
// their new name, whichever name is checked first: the rotten bytes never
// become that name's key. Nor when the names are swapped back after the
// old name was checked.
func TestFlaggedRecordDisplacedBySwap(t *testing.T) {
	for _, tc := range []struct {
		name string
		// order: the names checked, one after the other ("swap": swap them
		// again, "restart": stop the indexer and start it again); nil: a
		// scan.
		order []string
	}{
		{"old name first", []string{"a.bin", "z.bin"}},
		{"new name first", []string{"z.bin", "a.bin"}},
		{"a scan", nil},
		{"swapped back", []string{"a.bin", "swap", "a.bin", "z.bin"}},
		{"a restart between", []string{"a.bin", "restart", "z.bin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			a, z := filepath.Join(root, "a.bin"), filepath.Join(root, "z.bin")
			writeOld(t, a, "the rotten bytes of a")
			writeOld(t, z, "the bytes of z")
			e := newEnv(t, root, envOpts{noWatch: true, trace: true})
			e.settle(settleTimeout)
			good := flagCorrupt(t, e.st, a, "the good bytes of a")
			zRec, _, err := e.st.Get([]byte(z))
			must(t, err)
			e.stop()

			rotten, healthy := a, z // the names of the rotten and the healthy bytes
			swap := func() {
				swapNames(t, a, z)
				rotten, healthy = healthy, rotten
			}
			swap()
			e.found = nil
			e.start(envOpts{noWatch: true, noScan: tc.order != nil, trace: true})
			for _, name := range tc.order {
				switch name {
				case "swap":
					swap()
					continue
				case "restart":
					e.stop()
					e.start(envOpts{noWatch: true, noScan: true, trace: true})
					continue
				}
				e.checkNow(filepath.Join(root, name))
			}
			if tc.order == nil {
				must(t, e.ix.WaitIdle(context.Background()))
			}
			if r, ok, err := e.st.Get([]byte(rotten)); err != nil || !ok || r.State != store.StateCorrupt || !bytes.Equal(r.Digest, good) {
				t.Errorf("record of %s (the rotten bytes): %v %v %v %x; want corrupt with the good digest %x", rotten, ok, err, r.State, r.Digest, good)
			}
			if r, ok, err := e.st.Get([]byte(healthy)); err != nil || !ok || r.State != store.StateOK || !bytes.Equal(r.Digest, zRec.Digest) {
				t.Errorf("record of %s (the healthy bytes): %v %v %v %x; want ok with %x", healthy, ok, err, r.State, r.Digest, zRec.Digest)
			}
			if k := e.found.kinds()[rotten]; len(k) != 1 || k[0] != FoundCorrupt {
				t.Errorf("findings at %s: %v, want corrupt", rotten, k)
			}
			if tc.order != nil {
				e.ix.Rescan(root) // settle waits for the first scan
			}
			e.kept = map[string][]byte{rotten: good}
			e.settle(settleTimeout)
		})
	}
}

// A displaced record whose inode is gone (the rotten file replaced by
// renaming another over it while the daemon was stopped) is dropped when
// the first scans end: they would have met the inode. A new file in the
// reused inode, where no birth time tells it apart, is not held against
// it then.
func TestDisplacedRecordExpires(t *testing.T) {
	root := t.TempDir()
	a, z := filepath.Join(root, "a.bin"), filepath.Join(root, "z.bin")
	writeOld(t, a, "the rotten bytes of a")
	writeOld(t, z, "the bytes of z")
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	flagCorrupt(t, e.st, a, "the good bytes of a")
	e.stop()
	must(t, os.Rename(z, a))
	e.start(envOpts{noWatch: true, noScan: true})
	e.checkNow(a)
	if n := displacedEntries(t, e.st); n != 1 {
		t.Fatalf("%d displaced records in the index after the rotten file was replaced, want 1", n)
	}
	e.ix.Rescan(root) // the first scan of the root
	e.settle(settleTimeout)
	waitFor(t, "the displaced record dropped", func() bool { return displacedEntries(t, e.st) == 0 })
	e.ix.displaced.mu.Lock()
	defer e.ix.displaced.mu.Unlock()
	if len(e.ix.displaced.by) != 0 {
		t.Errorf("displaced records in memory after the first scans: %v", e.ix.displaced.by)
	}
}

// A flagged record whose inode has another name in the index (a hard
// link) is not kept when another file takes its path: the other name
// holds the finding.
func TestDisplacedNotKeptForAHardLink(t *testing.T) {
	root := t.TempDir()
	x, kept, other := filepath.Join(root, "x.bin"), filepath.Join(root, "kept.bin"), filepath.Join(root, "other.bin")
	writeOld(t, x, "the rotten bytes of x")
	must(t, os.Link(x, kept))
	writeOld(t, other, "the bytes of other")
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	good := flagCorrupt(t, e.st, x, "the good bytes of x")
	flagCorrupt(t, e.st, kept, "the good bytes of x")
	e.stop()
	must(t, os.Rename(other, x))
	e.start(envOpts{noWatch: true, noScan: true})
	e.checkNow(x)
	if n := displacedEntries(t, e.st); n != 0 {
		t.Errorf("%d displaced records kept for an inode with another name", n)
	}
	if r, ok, err := e.st.Get([]byte(kept)); err != nil || !ok || r.State != store.StateCorrupt || !bytes.Equal(r.Digest, good) {
		t.Errorf("record of %s: %v %v %v %x; want corrupt with %x", kept, ok, err, r.State, r.Digest, good)
	}
}

// After the first scans, a displaced record is believed for displacedLife
// only, and one of an inode whose record is written is dropped.
func TestDisplacedLife(t *testing.T) {
	e := newEnv(t, "", envOpts{noWatch: true, noScan: true})
	d := newDisplaced(e.st, e.ix.log)
	rec := store.Record{Dev: 1, Ino: 2, State: store.StateCorrupt}
	d.keep("/before", rec, 100, "test")
	d.settled(200, false) // a root's scan incomplete: entries made before stay
	rec.Ino = 3
	d.keep("/after", rec, 300, "test")
	life := int64(displacedLife)
	if _, ok := d.get(1, 2, 100+2*life); !ok {
		t.Error("an entry made before the first scans ended, which were incomplete, was dropped")
	}
	if _, ok := d.get(1, 3, 300+life); !ok {
		t.Error("an entry made after the first scans was dropped within its life")
	}
	if _, ok := d.get(1, 3, 301+life); ok {
		t.Error("an entry made after the first scans is believed after its life")
	}
	d.written(1, 2)
	if _, ok := d.get(1, 2, 400); ok {
		t.Error("an entry is believed after a record of its inode was written")
	}
	waitFor(t, "the dropped entries gone from the index", func() bool { return displacedEntries(t, e.st) == 0 })
}

// swapNames swaps the names of the files x and y, as mv x tmp; mv y x;
// mv tmp y does.
func swapNames(t *testing.T, x, y string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(x), "tmp.bin")
	must(t, os.Rename(x, tmp))
	must(t, os.Rename(y, x))
	must(t, os.Rename(tmp, y))
}

// checkNow has path checked and waits until the indexer has no work left.
func (e *env) checkNow(path string) {
	e.t.Helper()
	e.ix.Changed(context.Background(), path)
	waitFor(e.t, path+" checked", func() bool { return !e.ix.Working() })
}

func displacedEntries(t *testing.T, st *store.Store) int {
	t.Helper()
	n := 0
	must(t, st.MetaPrefix(context.Background(), displacedMeta, func(string, []byte) error { n++; return nil }))
	return n
}

// flagCorrupt makes the record of path what an audit's finding leaves: the
// key of content kept, flagged corrupt, with the file's stat identity. It
// returns that digest.
func flagCorrupt(t *testing.T, st *store.Store, path, content string) []byte {
	t.Helper()
	rec, ok, err := st.Get([]byte(path))
	if err != nil || !ok {
		t.Fatalf("record of %s: %v %v", path, ok, err)
	}
	sum := sha256.Sum256([]byte(content))
	rec.Digest, rec.State = sum[:], store.StateCorrupt
	must(t, st.Put(context.Background(), []byte(path), rec))
	return sum[:]
}

// A file whose record keeps its last key while it cannot be read, swapped
// by name with another while the daemon is stopped, keeps that key under
// its new name, whichever name is checked first: the record that says so
// came from the other name (a displaced record, or the other name's).
func TestUnreadableKeepsLastDigestAcrossASwap(t *testing.T) {
	if os.Getuid() == 0 {
		runAsNobody(t, "TestUnreadableKeepsLastDigestAcrossASwap")
		return
	}
	for _, first := range []string{"a.bin", "z.bin"} {
		t.Run(first+" first", func(t *testing.T) {
			root := t.TempDir()
			a, z := filepath.Join(root, "a.bin"), filepath.Join(root, "z.bin")
			writeOld(t, a, "the bytes of a")
			writeOld(t, z, "the bytes of z")
			e := newEnv(t, root, envOpts{noWatch: true})
			e.settle(settleTimeout)
			must(t, os.Chmod(a, 0))
			e.checkNow(a)
			was, _, err := e.st.Get([]byte(a))
			must(t, err)
			if was.State != store.StateUnreadable || !was.HasDigest() {
				t.Fatalf("record of %s made unreadable: %+v, want unreadable with its last digest", a, was)
			}
			e.stop()
			swapNames(t, a, z)
			e.start(envOpts{noWatch: true, noScan: true})
			second := map[string]string{"a.bin": "z.bin", "z.bin": "a.bin"}[first]
			e.checkNow(filepath.Join(root, first))
			e.checkNow(filepath.Join(root, second))
			if r, _, err := e.st.Get([]byte(z)); err != nil || r.State != store.StateUnreadable || !bytes.Equal(r.Digest, was.Digest) {
				t.Errorf("record of %s (the unreadable file now): %+v, %v; want unreadable with %x", z, r, err, was.Digest)
			}
		})
	}
}

// A flagged file renamed into another folder faster than the indexer
// applies the move is found gone at its old name first: by the scan of
// the folder it left (its sweep), or by a check of the old path (a drop).
// Either deletes the record; the finding must still follow the rotten
// bytes to their new name, never letting them become its key.
func TestFlaggedRecordKeptWhenItsFileIsFoundGone(t *testing.T) {
	for _, how := range []string{"sweep", "drop"} {
		t.Run(how, func(t *testing.T) {
			root := t.TempDir()
			from, to := filepath.Join(root, "d1", "x.bin"), filepath.Join(root, "d2", "y.bin")
			must(t, os.MkdirAll(filepath.Dir(to), 0o755))
			writeOld(t, from, "the rotten bytes of x")
			writeOld(t, filepath.Join(root, "d1", "stays.bin"), "a file that stays")
			e := newEnv(t, root, envOpts{noWatch: true})
			e.settle(settleTimeout)
			good := flagCorrupt(t, e.st, from, "the good bytes of x")
			e.stop()
			must(t, os.Rename(from, to))
			e.found = nil
			e.start(envOpts{noWatch: true, noScan: true})
			if how == "sweep" {
				e.ix.Rescan(filepath.Dir(from))
				waitFor(t, "the scan of the folder left", func() bool { return !e.ix.Working() })
			} else {
				e.checkNow(from)
			}
			if _, ok, err := e.st.Get([]byte(from)); err != nil || ok {
				t.Fatalf("the old name's record after the %s: %v %v; want it dropped", how, ok, err)
			}
			e.checkNow(to)
			if r, ok, err := e.st.Get([]byte(to)); err != nil || !ok || r.State != store.StateCorrupt || !bytes.Equal(r.Digest, good) {
				t.Errorf("record of %s (the rotten bytes, renamed): %v %v %v %x; want corrupt with the good digest %x",
					to, ok, err, r.State, r.Digest, good)
			}
			if k := e.found.kinds()[to]; len(k) != 1 || k[0] != FoundCorrupt {
				t.Errorf("findings at %s: %v, want corrupt", to, k)
			}
			e.ix.Rescan(root)
			e.kept = map[string][]byte{to: good}
			e.settle(settleTimeout)
		})
	}
}
