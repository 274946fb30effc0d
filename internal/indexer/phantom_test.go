package indexer

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files moved one by one out of a directory that is then deleted, one of
// them into an existing empty directory and another deleted: the records of
// the deleted file must not follow the moved one as if the whole directory
// had been renamed.
func TestMoveOutThenRemoveDirLeavesNoPhantoms(t *testing.T) {
	root := t.TempDir()
	writeOld(t, filepath.Join(root, "from/a.txt"), "file a")
	writeOld(t, filepath.Join(root, "from/b.txt"), "file b")
	must(t, os.Mkdir(filepath.Join(root, "to"), 0o755))
	e := newEnv(t, root, envOpts{})
	e.settle(settleTimeout)
	must(t, os.Rename(filepath.Join(root, "from/a.txt"), filepath.Join(root, "to/a.txt")))
	must(t, os.Remove(filepath.Join(root, "from/b.txt")))
	must(t, os.Remove(filepath.Join(root, "from")))
	time.Sleep(100 * time.Millisecond)
	e.settle(settleTimeout)
}
