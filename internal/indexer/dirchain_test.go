package indexer

import (
	"fmt"
	"os"
	"path/filepath"
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
