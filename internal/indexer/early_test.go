package indexer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annexd/annexd/walker"
)

// writeLarge makes a sparse file of size bytes with an mtime an hour ago.
func writeLarge(t *testing.T, p string, size int64) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	f, err := os.Create(p)
	must(t, err)
	must(t, f.Truncate(size))
	must(t, f.Close())
	old := time.Now().Add(-time.Hour)
	must(t, os.Chtimes(p, old, old))
}

// earlyTree writes n small files under a/ and one file of earlyMin bytes
// under z/, which the scan's walk meets last; it returns the large file's
// path and the tree's size.
func earlyTree(t *testing.T, root string, n int) (string, int64) {
	order := walkOrder(t, root, "a", "z")
	small, last := order[0], order[1]
	total := int64(len(small) + len(last)) // the two first files
	for i := range n - 2 {
		c := fmt.Sprint("small ", i)
		writeOld(t, filepath.Join(root, small, fmt.Sprintf("f%05d", i)), c)
		total += int64(len(c))
	}
	big := filepath.Join(root, last, "big.bin")
	writeLarge(t, big, earlyMin)
	return big, total + earlyMin
}

// checkEarly checks, once the scan is done, that every file was hashed
// once, the large one queued ahead of the walk, and that the scan counted
// each file once in what it saw.
func checkEarly(t *testing.T, e *env, big string, n int, total int64) {
	t.Helper()
	e.settle(settleTimeout)
	if got := e.h.count(big); got != 1 {
		t.Errorf("the large file was hashed %d times, want once", got)
	}
	if got := e.h.total(); got != n+1 {
		t.Errorf("%d hashes, want %d", got, n+1)
	}
	if got := e.ix.m.early.Load(); got != 1 {
		t.Errorf("%d files queued ahead of the walk, want 1", got)
	}
	want := totals{Files: int64(n) + 1, Bytes: total}
	waitFor(t, "the scan's totals", func() bool {
		b, ok, err := e.st.GetMeta(totalsMeta)
		var got map[string]totals
		return err == nil && ok && json.Unmarshal(b, &got) == nil && got[e.root] == want
	})
	if p := e.ix.Progress(); p.BytesSeen != total || p.FilesSeen != int64(n)+1 {
		t.Errorf("seen %d files, %d bytes; want %d, %d", p.FilesSeen, p.BytesSeen, n+1, total)
	}
}

// The counting walk queues a large file ahead of the scan's walk; the walk
// meets it while it is still being hashed, and the one more check that
// asks for settles it without hashing it again.
func TestLargeFileHashedAheadOfTheWalk(t *testing.T) {
	root := t.TempDir()
	const n = 4000
	big, total := earlyTree(t, root, n)
	h := &countingHasher{n: make(map[string]int)}
	entered, release := h.hold(big)
	open := sync.OnceFunc(func() { close(release) })
	pastRacyTick() // the files are old: none waits for its ctime to age
	e := newEnv(t, root, envOpts{h: h, noWatch: true, opts: Options{MaxPending: 8, WalkWorkers: 1}})
	t.Cleanup(open) // before the indexer stops, when the test fails
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the large file was not hashed")
	}
	if seen := e.ix.Progress().FilesSeen; seen > n {
		t.Fatalf("the walk had met all %d files when the large one began to be hashed: not ahead of it", seen)
	}
	waitFor(t, "the walk to meet the large file", func() bool { return e.ix.Progress().FilesSeen == n+1 })
	open()
	checkEarly(t, e, big, n, total)
}

// The large file queued ahead of the walk is hashed and recorded before
// the walk meets it; the walk's check finds its record current.
func TestLargeFileRecordedBeforeTheWalkMeetsIt(t *testing.T) {
	root := t.TempDir()
	const n = 4000
	big, total := earlyTree(t, root, n)
	h := &countingHasher{n: make(map[string]int)}
	entered, release := h.hold(filepath.Join(root, "a/f00000")) // holds one of two workers
	open := sync.OnceFunc(func() { close(release) })
	pastRacyTick() // the files are old: none waits for its ctime to age
	e := newEnv(t, root, envOpts{h: h, noWatch: true, opts: Options{MaxPending: 8, WalkWorkers: 1, Workers: 2}})
	t.Cleanup(open) // before the indexer stops, when the test fails
	<-entered
	waitFor(t, "the large file's record", func() bool {
		_, ok, err := e.st.Get([]byte(big))
		return err == nil && ok
	})
	if seen := e.ix.Progress().FilesSeen; seen > n {
		t.Fatalf("the walk had met all %d files when the large one was recorded: not ahead of it", seen)
	}
	open()
	checkEarly(t, e, big, n, total)
}

// dirOrder returns the names of dir in the order getdents gives them.
func dirOrder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open(dir)
	must(t, err)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	must(t, err)
	return names
}

// walkOrder makes the directories names under root, a file in each, and
// returns them in the order a walk of one reader meets them, as the scan's
// walk and its count meet them (the file system's order of names, not
// theirs).
func walkOrder(t *testing.T, root string, names ...string) []string {
	t.Helper()
	for _, n := range names {
		writeOld(t, filepath.Join(root, n, "first"), n)
	}
	var order []string
	err := walker.Walk(context.Background(), root, walker.Options{Workers: 1, NoStat: true}, func(e walker.Entry) error {
		order = append(order, filepath.Base(filepath.Dir(e.Path)))
		return nil
	})
	must(t, err)
	return order
}

// The walk's checker looks the large file up while it is hashed ahead of
// the walk (no record yet), then waits on the full queue; meanwhile the
// file is recorded and leaves the pipeline. The walk's job must look again
// rather than take the file for absent and hash it a second time.
func TestEarlyFileRecordedBetweenLookupAndQueue(t *testing.T) {
	root := t.TempDir()
	const n = 300
	for i := range n {
		writeOld(t, filepath.Join(root, fmt.Sprintf("a/f%05d", i)), fmt.Sprint("small ", i))
	}
	// The large file must come after the first 20 names of its directory,
	// so that the queue is full when the walk meets it: the directory's
	// order is the file system's, so the name is chosen until it does.
	var big string
	for i := 0; ; i++ {
		big = filepath.Join(root, fmt.Sprintf("a/big%d.bin", i))
		writeLarge(t, big, earlyMin)
		if slices.Index(dirOrder(t, filepath.Join(root, "a")), filepath.Base(big)) >= 20 {
			break
		}
		must(t, os.Remove(big))
		if i == 100 {
			t.Fatal("no name of 100 comes after the first 20 in the directory")
		}
	}
	h := &countingHasher{n: make(map[string]int)}
	var bigIn atomic.Bool
	bigEntered, releaseBig, releaseSmall := make(chan struct{}), make(chan struct{}), make(chan struct{})
	entered := sync.OnceFunc(func() { close(bigEntered) })
	h.gate = func(p string) {
		switch {
		case p == big && !bigIn.Load():
			bigIn.Store(true)
			entered()
			<-releaseBig
		case p != big && bigIn.Load():
			<-releaseSmall // the other worker stops too: the queue fills
		}
	}
	openBig, openSmall := sync.OnceFunc(func() { close(releaseBig) }), sync.OnceFunc(func() { close(releaseSmall) })
	pastRacyTick() // the files are old: none waits for its ctime to age
	e := newEnv(t, root, envOpts{h: h, noWatch: true, opts: Options{MaxPending: 8, WalkWorkers: 1, Workers: 2}})
	t.Cleanup(func() { openBig(); openSmall() })
	select {
	case <-bigEntered:
	case <-time.After(20 * time.Second):
		t.Fatal("the large file was not hashed")
	}
	if e.ix.m.early.Load() != 1 {
		// The count starts first and stats 20 names to reach the file,
		// while the walk's checkers queue 20 behind a queue of 8; losing
		// that race leaves no case to test, not a fault.
		t.Skip("the walk met the large file before the count did")
	}
	waitFor(t, "the walk to hand every file to its checkers", func() bool { return e.ix.Progress().FilesSeen == n+1 })
	time.Sleep(300 * time.Millisecond) // the checkers look their batches up, and wait on the full queue
	openBig()
	waitFor(t, "the large file recorded and out of the pipeline", func() bool {
		_, ok, err := e.st.Get([]byte(big))
		return err == nil && ok && !e.ix.pipe.pend.has(big)
	})
	openSmall()
	e.settle(settleTimeout)
	if got := h.count(big); got != 1 {
		t.Errorf("the large file was hashed %d times, want once", got)
	}
}

// The walk meets a large file while it is hashed ahead of it; once the file
// is settled, the walk's settled bytes count it, as its seen bytes do.
func TestEarlyFileCountsInDoneBytes(t *testing.T) {
	root := t.TempDir()
	order := walkOrder(t, root, "a", "m", "z")
	// The walk's checkers queue a's files behind a queue of 8, seconds'
	// work under -race, while the count only stats them: it queues the
	// large file long before the walk's check comes to it. (With 3000
	// the walk came to it at 17 s, near waitFor's 20 s under load.)
	for i := range 1000 {
		writeOld(t, filepath.Join(root, order[0], fmt.Sprintf("f%05d", i)), fmt.Sprint("small ", i))
	}
	big := filepath.Join(root, order[1], "big.bin")
	writeLarge(t, big, earlyMin)
	for i := range 20 {
		writeOld(t, filepath.Join(root, order[2], fmt.Sprintf("f%05d", i)), fmt.Sprint("later ", i))
	}
	h := &countingHasher{n: make(map[string]int)}
	// The first of z's files is held until the test has looked: the scan
	// goes on meanwhile, however fast the rest of its walk.
	releaseBig, releaseLater := make(chan struct{}), make(chan struct{})
	var laterHeld atomic.Bool
	h.gate = func(p string) {
		switch {
		case p == big:
			<-releaseBig
		case filepath.Base(filepath.Dir(p)) == order[2] && !laterHeld.Swap(true):
			<-releaseLater
		}
	}
	openBig, openLater := sync.OnceFunc(func() { close(releaseBig) }), sync.OnceFunc(func() { close(releaseLater) })
	pastRacyTick() // the files are old: none waits for its ctime to age
	e := newEnv(t, root, envOpts{h: h, noWatch: true, opts: Options{MaxPending: 8, WalkWorkers: 1, Workers: 2}})
	t.Cleanup(func() { openBig(); openLater() })
	waitFor(t, "the walk to meet the large file while it is hashed", func() bool {
		p := e.ix.pipe.pend
		p.mu.Lock()
		defer p.mu.Unlock()
		en := p.m[big]
		return en != nil && en.again
	})
	if e.ix.m.early.Load() != 1 {
		t.Fatal("the large file was not queued ahead of the walk")
	}
	openBig()
	waitFor(t, "the large file to settle", func() bool { return !e.ix.pipe.pend.has(big) })
	p := e.ix.Progress()
	if p.Walk == nil {
		t.Fatal("the scan ended before the test could look, although one of its files is held")
	}
	if p.Walk.DoneBytes < earlyMin {
		t.Errorf("the walk's settled bytes %d leave out the large file (%d bytes) it saw, settled", p.Walk.DoneBytes, earlyMin)
	}
}

// A large file written to while it is hashed (a download, a disk image) is
// retried with a backoff. The scan whose walk met it must not wait for it
// to stop changing, whoever queued it: it keeps the old record, as it does
// for a file its own walk queued.
func TestScanNotHeldByChangingLargeFile(t *testing.T) {
	root := t.TempDir()
	order := walkOrder(t, root, "a", "z")
	for i := range 200 {
		writeOld(t, filepath.Join(root, order[0], fmt.Sprintf("f%05d", i)), fmt.Sprint("small ", i))
	}
	grow := filepath.Join(root, order[1], "grow.bin")
	writeLarge(t, grow, earlyMin+1)
	old := time.Now().Add(-time.Hour)
	h := &countingHasher{n: make(map[string]int)}
	// Every hash of the file meets a write: it grows by a byte as the hash
	// starts (its mtime kept old, so that no wait for a fresh mtime hides it).
	h.gate = func(p string) {
		if p != grow {
			return
		}
		f, err := os.OpenFile(grow, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Error(err)
			return
		}
		_, err = f.Write([]byte{1})
		must(t, errors.Join(err, f.Close(), os.Chtimes(grow, old, old)))
	}
	pastRacyTick() // the files are old: none waits for its ctime to age
	e := newEnv(t, root, envOpts{h: h, noWatch: true, opts: Options{MaxPending: 8, WalkWorkers: 1}})
	waitFor(t, "the scan to end while the large file keeps changing", func() bool { return e.ix.Progress().ScansCompleted > 0 })
	if e.ix.m.early.Load() != 1 || e.ix.Progress().Retries == 0 {
		t.Errorf("%d files queued ahead of the walk, %d retries: the test did not make the case it is about",
			e.ix.m.early.Load(), e.ix.Progress().Retries)
	}
}
