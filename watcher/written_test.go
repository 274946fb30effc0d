package watcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/annexd/annexd/internal/ledger"
)

// Every write the watcher reads reaches Options.Writes, by path and by
// inode, including writes to files renamed, deleted or moved with their
// directory before the write settled (a file moved with its directory is
// known under its new name too, through the move); a renamed file that
// was not written, or a file hashed after its write, is not written.
func TestWritesReachTheLedger(t *testing.T) {
	led := ledger.New()
	// From the writes of w, gone and d/in to their renames the files must
	// stay pending: a quiet delay far above the few syscalls in between,
	// even on a loaded machine.
	rec := start(t, Options{Quiet: 3 * time.Second, SyncDir: t.TempDir(), Writes: led})
	mustOK(t, os.Mkdir(rec.path("d"), 0o755))
	for _, rel := range []string{"w", "plain", "settled", "gone", "d/in", "x"} {
		write(t, rec.path(rel), "before")
	}
	rec.wait("files settled", func(evs []Event) bool { return has(evs, Rescan, rec.path("d")) && has(evs, Changed, rec.path("gone")) })
	rec.reset()
	start := time.Now().UnixNano()
	time.Sleep(10 * time.Millisecond)

	write(t, rec.path("settled"), "written, then left to settle")
	rec.wait("write settled", func(evs []Event) bool { return has(evs, Changed, rec.path("settled")) })
	hashed := time.Now().UnixNano() // as a consumer that hashed it now
	if !led.WrittenSince(rec.path("settled"), 0, 0, start) {
		t.Error("settled: written after start, but not in the ledger")
	}
	write(t, rec.path("w"), "written then renamed")
	write(t, rec.path("gone"), "written then deleted")
	write(t, rec.path("d/in"), "written then its directory moved")
	// The writes are read while the files still have their names (else
	// they count as written with unknown inodes, and so does every file).
	mustOK(t, rec.w.Sync(context.Background()))
	mustOK(t, os.Rename(rec.path("w"), rec.path("w2")))
	mustOK(t, os.Rename(rec.path("plain"), rec.path("plain2")))
	mustOK(t, os.Rename(rec.path("settled"), rec.path("settled2")))
	mustOK(t, os.Remove(rec.path("gone")))
	mustOK(t, os.Rename(rec.path("d"), rec.path("e")))
	write(t, rec.path("x"), "written then renamed twice")
	mustOK(t, rec.w.Sync(context.Background())) // the write is read while x still has its name
	mustOK(t, os.Rename(rec.path("x"), rec.path("x2")))
	mustOK(t, os.Rename(rec.path("x2"), rec.path("x3")))
	rec.wait("renames settled", func(evs []Event) bool { return moved(evs, rec.path("d"), rec.path("e")) })

	for rel, want := range map[string]bool{"w": true, "gone": true, "d/in": true, "plain": false,
		"w2": false, "e/in": true} {
		if got := led.WrittenSince(rec.path(rel), 0, 0, start); got != want {
			t.Errorf("WrittenSince(%s) = %v, want %v", rel, got, want)
		}
	}
	if led.WrittenSince(rec.path("settled"), 0, 0, hashed) {
		t.Error("settled: a record hashed after its write counts as written")
	}
	if led.WrittenSince(rec.path("w"), 0, 0, time.Now().UnixNano()) {
		t.Error("WrittenSince(w, now) = true: the write was before now")
	}
	// Known by neither its first nor its last name: by its inode.
	x3 := inodeOf(rec.path("x3"))
	if !led.WrittenSince(rec.path("x3"), x3.dev, x3.ino, start) {
		t.Error("x3 (written as x, renamed twice) not written by inode")
	}
	if led.WrittenSince(rec.path("x3"), 0, 0, start) {
		t.Error("x3 written by path: its name was never written")
	}
}

// A write to a file that replaced another at the same path is recorded
// with the new file's inode, not the one the path had at its first write.
func TestWriteAfterReplaceTakesNewInode(t *testing.T) {
	led := ledger.New()
	rec := start(t, Options{Quiet: 3 * time.Second, SyncDir: t.TempDir(), Writes: led})
	write(t, rec.path("f"), "first file")
	write(t, rec.path("new"), "second file")
	mustOK(t, rec.w.Sync(context.Background()))
	old, second := inodeOf(rec.path("f")), inodeOf(rec.path("new"))
	since := time.Now().UnixNano()
	mustOK(t, os.Rename(rec.path("new"), rec.path("f"))) // f is pending all along
	mustOK(t, rec.w.Sync(context.Background()))
	write(t, rec.path("f"), "second file, written")
	mustOK(t, rec.w.Sync(context.Background()))
	if !led.WrittenSince("/elsewhere", second.dev, second.ino, since) {
		t.Error("the write to the file now at f is not known by its inode")
	}
	if led.WrittenSince("/elsewhere", old.dev, old.ino, since) {
		t.Error("the write to the file now at f was recorded for the inode f had before")
	}
}

// An overflow tells the ledger that events of its root were lost: the
// files under it are in doubt, the files elsewhere are not.
func TestOverflowIsLost(t *testing.T) {
	led := ledger.New()
	rec := start(t, Options{SyncDir: t.TempDir(), Writes: led})
	before := time.Now().UnixNano()
	under := rec.path("d/f")
	if a := led.Since(under, 1, 1, before); a != ledger.NotWritten {
		t.Fatalf("%v before anything happened", a)
	}
	rec.w.injectOverflow(rec.root)
	rec.wait("overflow rescan", func(evs []Event) bool { return has(evs, Rescan, rec.root) })
	if a := led.Since(under, 1, 1, before); a != ledger.Unsure {
		t.Errorf("a file under the root, hashed before the overflow: %v, want unsure", a)
	}
	if a := led.Since("/elsewhere/f", 1, 1, before); a != ledger.NotWritten {
		t.Errorf("a file outside the root: %v, want not written", a)
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A write read after its file and another swapped names (the watcher
// stats the path once the swap is done, and finds the other file there)
// is no write of the file swapped in: it is Unsure at that path, and
// nothing by its inode. A write read before any rename is told by its
// inode once confirmed, and before Sync returns.
func TestWriteReadAfterASwapIsNoWriteOfTheFileSwappedIn(t *testing.T) {
	for _, swapped := range []bool{true, false} {
		t.Run(fmt.Sprintf("swapped=%v", swapped), func(t *testing.T) {
			led := ledger.New()
			dir := t.TempDir()
			a, r := filepath.Join(dir, "a"), filepath.Join(dir, "r")
			held, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			opts := Options{Quiet: 3 * time.Second, SyncDir: t.TempDir(), Writes: led}
			opts.beforeEvent = func(ev fsnotify.Event) {
				if ev.Name == a && ev.Has(fsnotify.Write) {
					once.Do(func() { close(held); <-release })
				}
			}
			write(t, a, "the writer's file")
			write(t, r, "a file nobody writes")
			rec := startAt(t, dir, opts)
			mustOK(t, rec.w.Sync(context.Background()))
			wa, wr := inodeOf(a), inodeOf(r)
			since := time.Now().UnixNano()
			f, err := os.OpenFile(a, os.O_APPEND|os.O_WRONLY, 0)
			mustOK(t, err)
			_, err = f.WriteString(", appended")
			mustOK(t, err)
			mustOK(t, f.Close())
			<-held // the watcher read the write, and has not looked at a yet
			if swapped {
				tmp := filepath.Join(dir, ".tmp")
				mustOK(t, os.Rename(a, tmp))
				mustOK(t, os.Rename(r, a))
				mustOK(t, os.Rename(tmp, r))
			}
			close(release)
			mustOK(t, rec.w.Sync(context.Background()))
			if !swapped {
				if got := led.Since("/elsewhere", wa.dev, wa.ino, since); got != ledger.Written {
					t.Errorf("the written file by its inode: %v, want written", got)
				}
				return
			}
			if got := led.Since("/elsewhere", wr.dev, wr.ino, since); got != ledger.NotWritten {
				t.Errorf("the file swapped in, by its inode: %v, want not written", got)
			}
			if got := led.Since(a, wr.dev, wr.ino, since); got != ledger.Unsure {
				t.Errorf("the file swapped in, at the path written: %v, want unsure", got)
			}
			if got := led.Since(a, wa.dev, wa.ino, since); got == ledger.NotWritten {
				t.Errorf("the written file, asked by its old name: %v, want a write or a doubt", got)
			}
		})
	}
}

// A write whose confirmation cookie is lost (as in an overflow) is
// Doubted once the wait for it runs out, without any other event.
func TestWriteDoubtedWhenItsCookieIsLost(t *testing.T) {
	led := ledger.New()
	opts := Options{Quiet: time.Minute, SyncDir: t.TempDir(), Writes: led}
	opts.confirmWait = 300 * time.Millisecond
	rec := start(t, opts)
	mustOK(t, rec.w.Sync(context.Background()))
	since := time.Now().UnixNano()
	rec.w.roots[0].dropCookies.Store(true)
	p := rec.path("f")
	write(t, p, "written, its cookie lost")
	id := inodeOf(p)
	waitFor(t, "the write doubted", func() bool { return led.Since(p, id.dev, id.ino, since) == ledger.Unsure })
	if got := led.Since("/elsewhere", id.dev, id.ino, since); got != ledger.NotWritten {
		t.Errorf("by its inode: %v, want not written: the stat was never confirmed", got)
	}
}
