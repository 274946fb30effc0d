package audit

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/indexer"
	"github.com/annexd/annexd/internal/ledger"
	"github.com/annexd/annexd/store"
)

// rewriteKeepMtime rewrites p with content of the same size and puts its
// mtime back: only the ctime shows the change.
func rewriteKeepMtime(t *testing.T, p, content string) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// A same-size rewrite with the mtime put back, whose event the watcher has
// not read yet when the audit meets it: the audit waits for the ledger
// (Options.SyncWrites) and asks again, finds the write, and hands the file
// to the indexer as an edit. Without a ledger to wait for, nothing saw the
// write: the file changed without a trace, and keeps its key.
func TestUntracedWaitsForTheLedger(t *testing.T) {
	for _, synced := range []bool{true, false} {
		t.Run(map[bool]string{true: "synced", false: "no sync"}[synced], func(t *testing.T) {
			led := ledger.New()
			var once sync.Once
			var unread func()
			o := envOptions()
			o.Ledger = led
			if synced {
				// The sync reads the event still queued: the write.
				o.SyncWrites = func(context.Context) error { once.Do(unread); return nil }
			}
			e := newEnv(t, "", o)
			e.write("doc.txt", "the first words")
			e.ix.Rescan(e.root)
			e.settle()
			p := e.path("doc.txt")
			before := e.record(p)
			waitFor(t, "the clock to pass the ctime", func() bool { return time.Now().UnixNano() > before.CtimeNs+1e6 })
			rewriteKeepMtime(t, p, "the other words")
			fi, err := fsstat.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			unread = func() { led.Written(p, fi.Dev, fi.Ino) }

			s := e.run(StartOptions{FullSpeed: true})
			e.settle()
			r := e.record(p)
			switch {
			case synced && (s.Found(Modified) != 1 || s.Found(Untraced) != 0):
				t.Fatalf("counts %v, want the rewrite modified", s.Counts)
			case synced && (r.State != store.StateOK || !bytes.Equal(r.Digest, digestOf("the other words"))):
				t.Fatalf("the edit was not recorded: %+v", r)
			case !synced && (s.Found(Untraced) != 1 || s.Found(Modified) != 0):
				t.Fatalf("counts %v, want the rewrite untraced", s.Counts)
			case !synced && (r.State != store.StateUntraced || !bytes.Equal(r.Digest, before.Digest) || r.CtimeNs != fi.CtimeNs):
				t.Fatalf("the key was not kept with the new ctime: %+v, before %+v", r, before)
			}
			if ps := e.problems(); len(ps) != map[bool]int{true: 0, false: 1}[synced] || int(e.a.Status().Problems) != len(ps) {
				t.Fatalf("problems %v, %d counted", ps, e.a.Status().Problems)
			}
		})
	}
}

// A doubt of the ledger (a write of unknown inode beside the file, its
// folder renamed away and back) is no write: rot under it is corrupt, and
// the record keeps its key.
func TestDoubtIsNoWrite(t *testing.T) {
	led := ledger.New()
	o := envOptions()
	o.Ledger = led
	e := newEnv(t, "", o)
	e.write("d/photo.jpg", "the photo")
	e.ix.Rescan(e.root)
	e.settle()
	p := e.path("d/photo.jpg")
	rotten := e.rot(p)
	led.Written(e.path("d/tmp123"), 0, 0) // gone before the watcher could stat it
	led.DirRenamed(e.path("d"))
	led.DirMoved(e.path("d"), e.path("d2"))
	led.DirRenamed(e.path("d2"))
	led.DirMoved(e.path("d2"), e.path("d"))
	fi, _ := fsstat.Lstat(p)
	if a := led.Since(p, fi.Dev, fi.Ino, rotten.HashedAt); a != ledger.Unsure {
		t.Fatalf("the ledger says %v; the test wants a doubt", a)
	}
	s := e.run(StartOptions{FullSpeed: true})
	if s.Found(Corrupt) != 1 || s.Found(Modified) != 0 {
		t.Fatalf("counts %v", s.Counts)
	}
	e.settle()
	if r := e.record(p); r.State != store.StateCorrupt || !bytes.Equal(r.Digest, rotten.Digest) {
		t.Fatalf("record %+v, want corrupt with the recorded digest", r)
	}
	// The indexer, asked to look again under the same doubt, keeps it.
	e.ix.Rehash(p)
	e.settle()
	if r := e.record(p); r.State != store.StateCorrupt || !bytes.Equal(r.Digest, rotten.Digest) {
		t.Fatalf("after the indexer hashed it again: %+v", r)
	}
	if ps := e.problems(); len(ps) != 1 || ps[p].Class != Corrupt {
		t.Fatalf("problems %v", ps)
	}
}

// A finding follows its file when the indexer gives a renamed file the
// flagged record: it is listed under the new path, counted once, moved
// there when the entries are pruned, and accepted there.
func TestFindingFollowsRename(t *testing.T) {
	e := newEnv(t, "", envOptions())
	e.write("a/photo.jpg", "the photo")
	e.ix.Rescan(e.root)
	e.settle()
	old, moved := e.path("a/photo.jpg"), e.path("b/renamed.jpg")
	rotten := e.rot(old)
	if s := e.run(StartOptions{FullSpeed: true}); s.Found(Corrupt) != 1 {
		t.Fatalf("counts %v", s.Counts)
	}
	if err := os.MkdirAll(e.path("b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(old, moved); err != nil {
		t.Fatal(err)
	}
	e.ix.Changed(context.Background(), moved)
	e.ix.Removed(old)
	e.settle()
	waitFor(t, "the old record to go", func() bool { _, ok, _ := e.st.Get([]byte(old)); return !ok })
	if r := e.record(moved); r.State != store.StateCorrupt || !bytes.Equal(r.Digest, rotten.Digest) {
		t.Fatalf("the renamed file's record: %+v", r)
	}
	ps := e.problems()
	if len(ps) != 1 || ps[moved].Class != Corrupt || e.a.Status().Problems != 1 {
		t.Fatalf("problems %v, %d counted", ps, e.a.Status().Problems)
	}
	if err := e.a.pruneEntries(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.a.getEntry(moved); !ok {
		t.Fatal("the entry did not move to the new path")
	}
	if _, ok := e.a.getEntry(old); ok {
		t.Fatal("the entry is still at the old path")
	}
	res, err := e.a.Accept(context.Background(), []byte(moved))
	if err != nil || len(res.Accepted) != 1 {
		t.Fatalf("accept: %+v, %v", res, err)
	}
	if n := len(e.problems()); n != 0 || e.a.Status().Problems != 0 {
		t.Fatalf("after accept: %d listed, %d counted", n, e.a.Status().Problems)
	}
}

// A lost write stays listed when the indexer hashes the same bytes again
// (a second unclean end makes it do so), and goes when the file is edited.
// Status counts what Problems lists all along.
func TestLostWriteStandsUntilEdited(t *testing.T) {
	e := newEnv(t, "", envOptions())
	e.write("doc.odt", "the bytes on disk")
	e.ix.Rescan(e.root)
	e.settle()
	p := e.path("doc.odt")
	now := e.record(p)
	was := now
	was.Digest = digestOf("the bytes in memory")
	e.a.Found(Report{Path: p, From: p, Class: LostWrite, Was: was, Now: now, Observed: now.Digest})
	waitFor(t, "the lost write to be listed", func() bool { return len(e.problems()) == 1 })

	e.ix.Rehash(p) // the same bytes, hashed again
	e.settle()
	if r := e.record(p); r.HashedAt == now.HashedAt {
		t.Fatal("the file was not hashed again")
	}
	if n := len(e.problems()); n != 1 || e.a.Status().Problems != 1 {
		t.Fatalf("after the same bytes were hashed again: %d listed, %d counted", n, e.a.Status().Problems)
	}
	// The last count of the coverage stands (a slow count, or one just
	// made): status must count the problems again all the same, since
	// the edit ends the finding in the record, not in the book.
	e.a.mu.Lock()
	e.a.coverTook = time.Hour
	e.a.mu.Unlock()
	e.write("doc.odt", "an edit, some new bytes")
	e.ix.Changed(context.Background(), p)
	e.settle()
	if n := len(e.problems()); n != 0 || e.a.Status().Problems != 0 {
		t.Fatalf("after an edit: %d listed, %d counted", n, e.a.Status().Problems)
	}
}

// The indexer's findings keep the class of a finding that stands: a file
// found changed without a trace stays so when the indexer finds it
// corrupt later, an unreadable file readable again takes the class it had
// before, and a new name of a flagged inode takes that finding's class.
func TestFoundKeepsTheStandingClass(t *testing.T) {
	e := newEnv(t, "", envOptions())
	e.write("a", "file a")
	e.write("b", "file b")
	e.ix.Rescan(e.root)
	e.settle()
	flag := func(path string, c Class, prior Class) store.Record {
		r := e.record(path)
		r.State = store.StateCorrupt
		if c == Unreadable {
			r.State = store.StateUnreadable
		}
		if err := e.st.Put(context.Background(), []byte(path), r); err != nil {
			t.Fatal(err)
		}
		en := entry{Class: c.String(), Backend: r.Backend.String(), Recorded: r.Digest, Size: r.Size, HashedAt: r.HashedAt,
			Dev: r.Dev, Ino: r.Ino, Seen: time.Now().UnixNano()}
		if prior != 0 {
			en.Prior = prior.String()
		}
		if err := e.a.putEntry(context.Background(), []byte(path), en); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := e.path("a"), e.path("b")
	ra := flag(a, Untraced, 0)
	e.a.Found(Report{Path: a, From: a, Class: Corrupt, Was: ra, Now: ra, Observed: digestOf("rot")})
	rb := flag(b, Unreadable, Corrupt)
	readable := rb
	readable.State = store.StateCorrupt
	if err := e.st.Put(context.Background(), []byte(b), readable); err != nil {
		t.Fatal(err)
	}
	e.a.Found(Report{Path: b, From: b, Class: Untraced, Was: rb, Now: readable, Observed: digestOf("rot")})
	link := e.path("link")
	e.a.Found(Report{Path: link, From: a, Class: Corrupt, Was: ra, Now: ra, Observed: digestOf("rot")})
	if err := e.st.Put(context.Background(), []byte(link), ra); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the findings", func() bool {
		ps := e.problems()
		return ps[a].Class == Untraced && ps[b].Class == Corrupt && ps[link].Class == Untraced
	})
	if n := e.a.Status().Problems; n != 3 {
		t.Fatalf("%d counted, want 3", n)
	}
}

// A same-size rewrite with the mtime put back, made through another name
// of the file (a hard link), which the ledger has by that name alone: the
// watcher read the event after the name had moved, and could not stat
// it. The ctime the names share moved, so the audit asks about every
// name of the inode: an edit, handed to the indexer, never a change
// without a trace.
func TestEditThroughAnotherName(t *testing.T) {
	led := ledger.New()
	o := envOptions()
	o.Ledger = led
	e := newEnv(t, "", o)
	e.write("a/photo.jpg", "the first picture")
	p, link := e.path("a/photo.jpg"), e.path("b/photo.jpg")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(p, link); err != nil {
		t.Fatal(err)
	}
	e.ix.Rescan(e.root)
	e.settle()
	before := e.record(p)
	waitFor(t, "the clock to pass the ctime", func() bool { return time.Now().UnixNano() > before.CtimeNs+1e6 })
	rewriteKeepMtime(t, link, "the other picture")
	led.Written(link, 0, 0)

	s := e.run(StartOptions{Paths: [][]byte{[]byte(e.path("a"))}, FullSpeed: true})
	e.settle()
	if s.Found(Modified) != 1 || s.Found(Untraced) != 0 {
		t.Fatalf("counts %v, want the rewrite modified", s.Counts)
	}
	if r := e.record(p); r.State != store.StateOK || !bytes.Equal(r.Digest, digestOf("the other picture")) {
		t.Fatalf("the edit was not recorded: %+v", r)
	}
	if ps := e.problems(); len(ps) != 0 {
		t.Fatalf("problems %v", ps)
	}
}

// An index of schema 7 had one flagged state for corrupt and untraced
// records: only the finding said which. The audit, at its start, gives an
// untraced finding's record the state untraced, so lookup says so too.
func TestUntracedRecordOfSchema7(t *testing.T) {
	o := envOptions()
	e := newEnv(t, "", o)
	e.write("doc.txt", "the first words")
	e.ix.Rescan(e.root)
	e.settle()
	p := e.path("doc.txt")
	before := e.record(p)
	waitFor(t, "the clock to pass the ctime", func() bool { return time.Now().UnixNano() > before.CtimeNs+1e6 })
	rewriteKeepMtime(t, p, "the other words")
	if s := e.run(StartOptions{FullSpeed: true}); s.Found(Untraced) != 1 {
		t.Fatalf("counts %v, want the rewrite untraced", s.Counts)
	}
	old := e.record(p)
	old.State = store.StateCorrupt // as schema 7 wrote it
	if err := e.st.Put(context.Background(), []byte(p), old); err != nil {
		t.Fatal(err)
	}
	e.restart(o)
	for deadline := time.Now().Add(10 * time.Second); e.record(p).State != store.StateUntraced; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the record says %v, want untraced", e.record(p).State)
		}
	}
	if res, err := e.ix.Lookup(context.Background(), p, false); err != nil || res.State != indexer.Untraced {
		t.Fatalf("lookup %+v, %v; want untraced", res, err)
	}
	if ps := e.problems(); len(ps) != 1 || ps[p].Class != Untraced {
		t.Fatalf("problems %v", ps)
	}
}
