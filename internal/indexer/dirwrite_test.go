package indexer

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A file rewritten (mtime set back) right after its directory was renamed,
// before the watcher has read the rename: the write reaches the old
// directory's watch, which the watcher then drops, so nothing sees it.
// The new name keeps the old key, but flagged and reported changed
// without a trace: never current with the old key, never silently re-keyed.
func TestWriteRightAfterDirRename(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"d", "e"} {
		writeOld(t, filepath.Join(root, d, "a/f.txt"), "original content of the file in "+d)
	}
	e := newEnv(t, root, envOpts{})
	e.settle(settleTimeout)
	// Before the watcher reads the renames, however loaded the machine.
	e.blockWatcher()
	for _, d := range []string{"d", "e"} {
		must(t, os.Rename(filepath.Join(root, d), filepath.Join(root, d+"2")))
		p := filepath.Join(root, d+"2", "a/f.txt")
		rewriteKeepMtime(t, p)
		e.keep(p, "original content of the file in "+d)
	}
	e.pause <- false
	time.Sleep(100 * time.Millisecond)
	e.settle(settleTimeout)
	for p := range e.kept {
		if k := e.found.kinds()[p]; len(k) == 0 || k[len(k)-1] != FoundUntraced {
			t.Errorf("%s: found %v, want changed without a trace", p, k)
		}
	}
}

// A directory moved after an atomic save elsewhere (a file written and
// renamed at once, which the watcher cannot tell by inode, so that it
// answers "written" for every older record for a while): its files keep
// their ctime, which shows no write, and keep their keys without a hash.
func TestDirMoveAfterAtomicSaveKeepsKeys(t *testing.T) {
	root := t.TempDir()
	for i := range 20 {
		writeOld(t, filepath.Join(root, "videos", fmt.Sprintf("v%d.mkv", i)), fmt.Sprintf("video %d", i))
	}
	e := newEnv(t, root, envOpts{})
	e.settle(settleTimeout)
	writeFile(t, filepath.Join(root, "doc.tmp"), "saved")
	must(t, os.Rename(filepath.Join(root, "doc.tmp"), filepath.Join(root, "doc")))
	e.settle(settleTimeout)
	before := e.h.snapshot()
	must(t, os.Rename(filepath.Join(root, "videos"), filepath.Join(root, "films")))
	time.Sleep(100 * time.Millisecond)
	e.settle(settleTimeout)
	if hashed := e.h.hashedSince(before); len(hashed) != 0 {
		t.Errorf("moving a directory of 20 unchanged files hashed %v", hashed)
	}
}
