package dedup

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/ignore"
	"github.com/annexd/annexd/internal/loopfs"
)

// The flags of chattr +i and +a (FS_IMMUTABLE_FL, FS_APPEND_FL).
const (
	chattrI = 0x10
	chattrA = 0x20
)

// chattr sets or clears inode flags (chattrI, chattrA) of a
// file or folder, and clears them again when the test ends, before its
// file system goes.
func chattr(t *testing.T, path string, flags uint32, on bool) {
	t.Helper()
	set := func(on bool) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		cur, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
		if err != nil {
			return err
		}
		if on {
			cur |= flags
		} else {
			cur &^= flags
		}
		return unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(cur))
	}
	if err := set(on); err != nil {
		t.Fatalf("chattr %s: %v", path, err)
	}
	if on {
		t.Cleanup(func() { set(false) })
	}
}

// TestHardlinkRefusedAlone: a pair the kernel would refuse (an immutable
// or append-only keeper, copy or folder), a copy another process holds
// open for reading, and a copy with two names are each skipped for the
// reason, with nothing made; the other pair of the run is linked unless
// it shares the refused keeper. Before, an immutable
// keeper was an "error", a copy open for reading was linked (a process
// holding it could still change the removed copy), and so was a copy with
// two names, whose every step could not be undone.
func TestHardlinkRefusedAlone(t *testing.T) {
	data := content(43, 80_000)
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, fs *loopfs.FS) // before the files are recorded
		after func(t *testing.T, fs *loopfs.FS) // after, before the run
		want  Reason
		both  bool // the keeper's: both pairs are refused
	}{
		{name: "an immutable keeper", setup: func(t *testing.T, fs *loopfs.FS) { chattr(t, fs.Path("k"), chattrI, true) }, want: "refused", both: true},
		{name: "an append-only keeper", setup: func(t *testing.T, fs *loopfs.FS) { chattr(t, fs.Path("k"), chattrA, true) }, want: "refused", both: true},
		{name: "an immutable copy", setup: func(t *testing.T, fs *loopfs.FS) { chattr(t, fs.Path("a/t"), chattrI, true) }, want: "refused"},
		{name: "an append-only folder", setup: func(t *testing.T, fs *loopfs.FS) { chattr(t, fs.Path("a"), chattrA, true) }, want: "refused"},
		{name: "a copy open for reading", after: func(t *testing.T, fs *loopfs.FS) { holdOpenReading(t, fs.Path("a/t")) }, want: "in-use"},
		{name: "a copy with two names", setup: func(t *testing.T, fs *loopfs.FS) {
			// The keeper has two as well, or the copy would be kept.
			must(t, os.Link(fs.Path("k"), fs.Path("k2")))
			must(t, os.Link(fs.Path("a/t"), fs.Path("a/t2")))
		}, want: "links-elsewhere"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, st, d := hardlinkSetup(t, map[string][]byte{"k": data, "a/t": data, "b/t": data})
			must(t, os.Chtimes(fs.Path("k"), aLongTimeAgo, aLongTimeAgo))
			if c.setup != nil {
				c.setup(t, fs)
			}
			names := []string{"k", "a/t", "b/t"}
			for _, n := range []string{"k2", "a/t2"} {
				if _, err := os.Lstat(fs.Path(n)); err == nil {
					names = append(names, n)
				}
			}
			recordAll(t, st, fs, names...)
			if c.after != nil {
				c.after(t, fs)
			}
			before := lstat(t, fs.Path("a/t")).Ino
			_, res, err := runDedup(t, d, Request{PlanOptions: PlanOptions{Mode: Hardlink}})
			switch {
			case c.both && (err != nil || res.Done != 0 || res.Skipped[c.want] != 2):
				t.Errorf("done %d, skips %v, %v; want both pairs skipped as %s", res.Done, res.Skips, err, c.want)
			case c.both:
			case err != nil || len(res.Skips) != 1 || res.Skips[0].Reason != c.want || string(res.Skips[0].Target) != fs.Path("a/t"):
				t.Errorf("skips %v, %v; want a/t skipped alone as %s", res.Skips, err, c.want)
			case res.Done != 1 || lstat(t, fs.Path("b/t")).Ino != lstat(t, fs.Path("k")).Ino:
				t.Errorf("done %d; want b/t linked to k all the same", res.Done)
			}
			if lstat(t, fs.Path("a/t")).Ino != before {
				t.Error("a/t was relinked")
			}
			for _, n := range names {
				assertContent(t, fs.Path(n), data)
			}
			assertNoTemp(t, fs.Dir)
			assertNoIntents(t, st)
		})
	}
}

// holdOpenReading holds path open for reading until the test ends.
func holdOpenReading(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}

// TestHardlinkFolderMadeAppendOnly: a folder made append-only between the
// checks and the exchange leaves the step's temporary link, which the
// kernel will not let anyone remove. Its intent stays; a later run on
// other files is not stopped by it; once the flag goes, recovery removes
// the link. Before, every later hardlink run failed on its recovery
// ("unlink: operation not permitted") until the flag went.
func TestHardlinkFolderMadeAppendOnly(t *testing.T) {
	data := content(44, 80_000)
	fs, st, d := hardlinkSetup(t, map[string][]byte{"k": data, "a/t": data, "b/t": data})
	must(t, os.Chtimes(fs.Path("k"), aLongTimeAgo, aLongTimeAgo))
	recordAll(t, st, fs, "k", "a/t", "b/t")
	d.opt.Indexer = rehashFunc(func(p string) { record(t, st, p) }) // as the daemon's indexer
	atSteps(t, map[string]func(){"linked": func() { chattr(t, fs.Path("a"), chattrA, true) }})
	before := lstat(t, fs.Path("a/t")).Ino
	req := Request{PlanOptions: PlanOptions{Mode: Hardlink, Paths: [][]byte{[]byte(fs.Path("k")), []byte(fs.Path("a"))}}}
	_, res, err := runDedup(t, d, req)
	if err != nil || res.Done != 0 || len(res.Skips) != 1 || res.Skips[0].Reason != "refused" {
		t.Errorf("done %d, skips %v, %v; want a/t refused", res.Done, res.Skips, err)
	}
	if lstat(t, fs.Path("a/t")).Ino != before {
		t.Error("a/t was relinked")
	}
	assertContent(t, fs.Path("a/t"), data)

	// The flag is still there: the next run, on other files, goes ahead.
	testHookStep = nil
	req.Paths = [][]byte{[]byte(fs.Path("k")), []byte(fs.Path("b"))}
	_, res, err = runDedup(t, d, req)
	if err != nil || res.Done != 1 {
		t.Errorf("a later run on b: done %d, skips %v, %v; want b/t linked", res.Done, res.Skips, err)
	}

	chattr(t, fs.Path("a"), chattrA, false)
	if err := d.Recover(context.Background()); err != nil {
		t.Errorf("Recover once the flag is gone: %v", err)
	}
	assertNoTemp(t, fs.Dir)
	assertNoIntents(t, st)
	assertContent(t, fs.Path("a/t"), data)
	assertContent(t, fs.Path("k"), data)
}

// TestHardlinkKeeperLinkedElsewhere: a keeper with a link the index does
// not hold (outside every root, or a git-annex object, annex.thin style,
// indexed or not) is never linked to: an edit of the copy would change
// that file too. Before, the keeper's own link count was never looked at.
func TestHardlinkKeeperLinkedElsewhere(t *testing.T) {
	data := content(45, 80_000)
	for _, c := range []struct {
		name    string
		link    string // another name of the keeper
		indexed bool   // recorded in the index, as with [ignore] annex_objects
	}{
		{"a link outside the index", "elsewhere/k", false},
		{"a git-annex object, not indexed", "repo/.git/annex/objects/Xx/Yy/SHA256E-s80000--00.bin/SHA256E-s80000--00.bin", false},
		{"a git-annex object, indexed", "repo/.git/annex/objects/Xx/Yy/SHA256E-s80000--00.bin/SHA256E-s80000--00.bin", true},
		{"an object of a bare git-annex repository, indexed", "bare.git/annex/objects/f8/3a/SHA256E-s80000--00.bin/SHA256E-s80000--00.bin", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, st, d := hardlinkSetup(t, map[string][]byte{"repo/k": data, "copy/t": data})
			must(t, os.Chtimes(fs.Path("repo/k"), aLongTimeAgo, aLongTimeAgo))
			must(t, os.MkdirAll(filepath.Dir(fs.Path(c.link)), 0o755))
			must(t, os.Link(fs.Path("repo/k"), fs.Path(c.link)))
			recordAll(t, st, fs, "repo/k", "copy/t")
			if c.indexed {
				recordAll(t, st, fs, c.link)
			}
			_, res, err := runDedup(t, d, Request{PlanOptions: PlanOptions{Mode: Hardlink}})
			if err != nil || res.Done != 0 {
				t.Errorf("done %d, skips %v, %v; want nothing linked", res.Done, res.Skips, err)
			}
			if lstat(t, fs.Path("copy/t")).Ino == lstat(t, fs.Path(c.link)).Ino {
				t.Errorf("copy/t was linked to %s", c.link)
			}
			assertNoTemp(t, fs.Dir)
			assertNoIntents(t, st)
		})
	}
	// The object store indexed is what [ignore] annex_objects walks.
	if m, _ := ignore.New(ignore.DefaultsWithAnnexObjects()); m.Match("repo/.git/annex/objects/Xx/Yy/K/K", false) {
		t.Error("annex_objects does not index git-annex's objects: the indexed cases test nothing real")
	}
}

// TestHardlinkKeeperNamedOutsideTheRoots: a keeper whose other name the
// index holds but outside the daemon's roots (records left from a root
// no longer watched) is not linked to either.
func TestHardlinkKeeperNamedOutsideTheRoots(t *testing.T) {
	data := content(49, 80_000)
	fs, st, d := hardlinkSetup(t, map[string][]byte{"in/k": data, "in/t": data})
	must(t, os.Chtimes(fs.Path("in/k"), aLongTimeAgo, aLongTimeAgo))
	must(t, os.MkdirAll(fs.Path("out"), 0o755))
	must(t, os.Link(fs.Path("in/k"), fs.Path("out/k")))
	recordAll(t, st, fs, "in/k", "in/t", "out/k")
	d.opt.Roots = [][]byte{[]byte(fs.Path("in"))}
	_, res, err := runDedup(t, d, Request{PlanOptions: PlanOptions{Mode: Hardlink, Paths: [][]byte{[]byte(fs.Path("in"))}}})
	if err != nil || res.Done != 0 || res.Skipped[SkipLinks] != 1 {
		t.Errorf("done %d, skips %v, %v; want in/t skipped: the keeper has a name outside the roots", res.Done, res.Skips, err)
	}
	if lstat(t, fs.Path("in/t")).Ino == lstat(t, fs.Path("in/k")).Ino {
		t.Error("in/t was linked to a keeper named outside the roots")
	}
	assertNoTemp(t, fs.Dir)
}
