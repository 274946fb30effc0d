package audit

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/indexer"
	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/store"
	"github.com/annexd/annexd/watcher"
)

func mustRun(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// watchTree starts a real watcher on root, recording into a write
// ledger, and returns the ledger, a function that lists the events seen
// so far, and the watcher.
func watchTree(t *testing.T, root string) (*ledger.Ledger, func() []watcher.Event, *watcher.Watcher) {
	t.Helper()
	led := ledger.New()
	w, err := watcher.New([]string{root}, watcher.Options{Writes: led, Quiet: 50 * time.Millisecond, SyncDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			t.Errorf("watcher: %v", err)
		}
	}()
	var evs []watcher.Event
	evCh := make(chan watcher.Event, 1024)
	go func() {
		for ev := range w.Events() {
			evCh <- ev
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	seen := func() []watcher.Event {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := w.Sync(sctx); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case ev := <-evCh:
				evs = append(evs, ev)
			default:
				return evs
			}
		}
	}
	return led, seen, w
}

// A byte flipped in a file's data blocks behind ext4's back (in the image,
// with the file's cache dropped): stat is unchanged and no event or write
// is seen, so the audit reports the file corrupt, keeps its record and key,
// and a lookup reports it corrupt with the old key, never the new digest's.
// On the same file system an edit, a same-size rewrite with the mtime put
// back and a deletion are changes, not corruption: the run meets the
// rewrite before the watcher's event is read, and asks the ledger again
// once it has caught up (Options.SyncWrites).
func TestBitFlipOnExt4(t *testing.T) {
	l := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := filepath.Join(l.Dir, "tree")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(root, "photo.jpg")
	data := make([]byte, 256<<10)
	_, _ = rand.Read(data)
	if err := os.WriteFile(victim, data, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(victim, old, old); err != nil {
		t.Fatal(err)
	}
	led, seen, w := watchTree(t, root)
	o := envOptions()
	o.Ledger, o.SyncWrites = led, w.Sync // as the daemon wires them
	e := newEnv(t, root, o)
	e.write("edited.txt", "an edit follows")
	e.write("restored.txt", "a same-size rewrite follows")
	e.write("deleted.txt", "a deletion follows")
	e.ix.Rescan(root)
	e.settle()
	l.Sync(t)
	recBefore := e.record(victim)
	statBefore, _ := fsstat.Lstat(victim)

	l.FlipByte(t, victim, 1000)
	statAfter, _ := fsstat.Lstat(victim)
	if !statAfter.Same(statBefore) {
		t.Fatalf("the flip changed stat: %+v → %+v", statBefore, statAfter)
	}
	for _, ev := range seen() {
		if ev.Path == victim {
			t.Fatalf("an event for the flipped file: %+v", ev)
		}
	}
	if a := led.Since(victim, statAfter.Dev, statAfter.Ino, recBefore.HashedAt); a != ledger.NotWritten {
		t.Fatalf("the ledger says %v of the flipped file", a)
	}
	// The other changes, through the file system (the watcher sees them;
	// the indexer is not told).
	if err := os.WriteFile(e.path("edited.txt"), []byte("edited with a new mtime"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(e.path("restored.txt"))
	if err := os.WriteFile(e.path("restored.txt"), []byte("A SAME-SIZE REWRITE FOLLOWS"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(e.path("restored.txt"), fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.path("deleted.txt")); err != nil {
		t.Fatal(err)
	}

	s := e.run(StartOptions{})
	if s.Found(Corrupt) != 1 || s.Found(Modified) != 2 || s.Found(Missing) != 1 || s.Found(OK) != 0 {
		t.Fatalf("counts %v\n%s", s.Counts, e.log)
	}
	r := e.record(victim)
	if r.State != store.StateCorrupt || !bytes.Equal(r.Digest, recBefore.Digest) || r.HashedAt != recBefore.HashedAt {
		t.Fatalf("record after the audit: %+v, before %+v", r, recBefore)
	}
	flipped := bytes.Clone(data)
	flipped[1000] ^= 0xff
	sum := sha256.Sum256(flipped)
	p, ok := e.problems()[victim]
	if !ok || p.Class != Corrupt || !bytes.Equal(p.Observed, sum[:]) || !bytes.Equal(p.Recorded, recBefore.Digest) {
		t.Fatalf("problem %+v (listed %v)", p, ok)
	}
	res, err := e.ix.Lookup(context.Background(), victim, true)
	if err != nil || res.State != indexer.Corrupt || res.Key.String() != p.RecordedKey || res.Key.String() == p.ObservedKey {
		t.Fatalf("lookup: %+v, %v; recorded key %s", res, err, p.RecordedKey)
	}
	e.settle()
	for rel, content := range map[string]string{"edited.txt": "edited with a new mtime", "restored.txt": "A SAME-SIZE REWRITE FOLLOWS"} {
		if r := e.record(e.path(rel)); !bytes.Equal(r.Digest, digestOf(content)) || r.State != store.StateOK {
			t.Errorf("%s was not recorded as changed: %+v", rel, r)
		}
	}
}

// A power cut after a same-size rewrite in place on XFS: the log kept the
// new mtime and ctime, the data blocks the old bytes, and the record holds
// the new bytes' digest. With the unclean shutdown known, the audit calls
// it a lost write and records the bytes on disk; without, it cannot tell
// it from bit rot and reports it corrupt.
func TestPowerCutIsLostWrite(t *testing.T) {
	for _, known := range []bool{true, false} {
		t.Run(map[bool]string{true: "shutdown known", false: "shutdown unknown"}[known], func(t *testing.T) {
			powerCut(t, known)
		})
	}
}

func powerCut(t *testing.T, known bool) {
	l := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: loopfs.MinSize[loopfs.XFS]})
	root := filepath.Join(l.Dir, "tree")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(root, "doc.odt")
	before := bytes.Repeat([]byte("the bytes on disk "), 4096)
	if err := os.WriteFile(victim, before, 0o644); err != nil {
		t.Fatal(err)
	}
	l.Sync(t)
	e := newEnv(t, root, envOptions())
	// The rewrite, in place and the same size, stays in the page cache, and
	// a record of it is committed as a hasher reading the page cache (with
	// no data sync) would make it.
	after := bytes.Repeat([]byte("THE BYTES IN MEMORY"), len(before)/19+1)[:len(before)]
	f, err := os.OpenFile(victim, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(after, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fi, _ := fsstat.Lstat(victim)
	// Hashed later than the timestamp granularity after the write, so the
	// record is not racily clean (which would have it verified anyway).
	waitFor(t, "the clock to leave the rewrite's timestamp tick", func() bool {
		return time.Now().UnixNano() > fi.MtimeNs+2*int64(fsstat.FineGranularity)
	})
	hashed := e.record(victim)
	hashed.Digest, hashed.Size, hashed.MtimeNs, hashed.CtimeNs = digestOf(string(after)), fi.Size, fi.MtimeNs, fi.CtimeNs
	hashed.HashedAt = time.Now().UnixNano()
	hashed.VerifiedAt = hashed.HashedAt
	if err := e.st.Put(context.Background(), []byte(victim), hashed); err != nil {
		t.Fatal(err)
	}
	// The cut: the log (with the inode's new timestamps) reaches the disk,
	// the data blocks do not.
	cutFrom := time.Now().UnixNano()
	mustRun(t, "xfs_io", "-x", "-c", "shutdown -f", l.Dir)
	spans := &Spans{}
	o := envOptions()
	if known {
		o.Crashes = spans
	}
	stale := e.record(victim)
	e.stop()
	l.Unmount(t) // the device stays attached: the file system keeps its device number
	l.Mount(t)
	spans.Add(cutFrom, time.Now().UnixNano()) // what the next start learns from the index's run marker
	got, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, before) {
		// Writeback (pushed by other load on the machine) won the race:
		// the disk got the new bytes before the cut. Put the old ones back
		// behind XFS's back, the state a cut a moment earlier leaves.
		t.Log("the new bytes reached the disk before the cut; restoring the old ones in the image")
		l.WriteBehind(t, victim, before)
		if got, _ := os.ReadFile(victim); !bytes.Equal(got, before) {
			t.Fatal("the old bytes could not be put back")
		}
	}
	if fi, _ := fsstat.Lstat(victim); !sameIdentity(&stale, fi) {
		t.Fatalf("the identity did not survive the cut: record %+v, file %+v", stale, fi)
	}
	e.start(o)
	s := e.run(StartOptions{})
	r := e.record(victim)
	p := e.problems()[victim]
	if !known {
		if s.Found(Corrupt) != 1 || r.State != store.StateCorrupt || p.Class != Corrupt {
			t.Fatalf("without the shutdown known: counts %v, record %+v", s.Counts, r)
		}
		return
	}
	if s.Found(LostWrite) != 1 || s.Found(Corrupt) != 0 {
		t.Fatalf("counts %v\n%s", s.Counts, e.log)
	}
	if r.State != store.StateOK || !bytes.Equal(r.Digest, digestOf(string(before))) || r.HashedAt <= stale.HashedAt {
		t.Fatalf("record after a lost write: %+v", r)
	}
	if p.Class != LostWrite || !bytes.Equal(p.Recorded, digestOf(string(after))) || !bytes.Equal(p.Observed, digestOf(string(before))) {
		t.Fatalf("problem %+v", p)
	}
	res, err := e.ix.Lookup(context.Background(), victim, false)
	if err != nil || res.State != indexer.Current || res.Key.String() != p.ObservedKey {
		t.Fatalf("lookup after a lost write: %+v, %v", res, err)
	}
	if _, err := e.a.Accept(context.Background(), []byte(victim)); err != nil {
		t.Fatal(err)
	}
	if len(e.problems()) != 0 {
		t.Fatal("the lost write is still listed after accept")
	}
}
