package indexer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A directory renamed twice, a file created in it at once: the file must
// be in the index once the daemon is idle. The move of the directory's
// records must not drop a record written under its new name meanwhile.
func TestFileInDirectoryRenamedTwice(t *testing.T) {
	root := t.TempDir()
	const dirs = 8
	for i := range dirs {
		for j := range 3 {
			writeOld(t, filepath.Join(root, "p1", fmt.Sprintf("d%d/f%d.txt", i, j)), fmt.Sprintf("file %d of %d", j, i))
		}
	}
	must(t, os.Mkdir(filepath.Join(root, "p2"), 0o755))
	must(t, os.Mkdir(filepath.Join(root, "p3"), 0o755))
	e := newEnv(t, root, envOpts{})
	e.settle(settleTimeout)
	for i := range dirs {
		d, r, s := filepath.Join(root, "p1", fmt.Sprint("d", i)), filepath.Join(root, "p2", fmt.Sprint("r", i)),
			filepath.Join(root, "p3", fmt.Sprint("s", i))
		must(t, os.Rename(d, r))
		must(t, os.Rename(r, s))
		writeFile(t, filepath.Join(s, "x.txt"), "\n")
	}
	e.settle(settleTimeout)
}

// A directory the watcher saw renamed (a Moved event) takes its records
// along without a hash, and a file created under the new name at once
// keeps its record whichever is written first.
func TestMovedDirectoryKeepsRecords(t *testing.T) {
	root := t.TempDir()
	for i := range 5 {
		writeOld(t, filepath.Join(root, "a", fmt.Sprintf("f%d.txt", i)), fmt.Sprint("file ", i))
	}
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(settleTimeout)
	before := e.h.snapshot()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	must(t, os.Rename(a, b))
	x := filepath.Join(b, "x.txt")
	writeFile(t, x, "new")
	ctx := context.Background()
	e.ix.Changed(ctx, x)
	e.ix.Moved(ctx, a, b)
	e.settle(settleTimeout)
	if hashed := e.h.hashedSince(before); !slices.Equal(hashed, []string{x}) {
		t.Errorf("hashed %v after the move, want only %s", hashed, x)
	}
	if n := e.ix.Progress().Renames; n < 5 {
		t.Errorf("%d records moved, want 5", n)
	}
}
