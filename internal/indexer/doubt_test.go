package indexer

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/annexd/annexd/store"
)

// A doubt of the ledger is no write. A file whose stat identity, ctime
// included, is its record's cannot have been written since, so a check
// under a doubt (events lost to an overflow, a write of unknown inode
// beside the files, their folder renamed away) hashes none of them, and
// a record flagged corrupt stays flagged. (A walk settles such files by
// their identity alone; a check asked for by an event or an audit's
// hand-off asks the ledger.)
func TestDoubtHashesNothing(t *testing.T) {
	root := t.TempDir()
	var paths []string
	for i := range 12 {
		p := filepath.Join(root, fmt.Sprint("d", i%3), fmt.Sprint("f", i))
		writeOld(t, p, fmt.Sprint("content ", i))
		paths = append(paths, p)
	}
	e := newEnv(t, root, envOpts{})
	e.settle(settleTimeout)
	flagged := paths[0]
	rec, _, err := e.st.Get([]byte(flagged))
	must(t, err)
	rec.State, rec.Digest = store.StateCorrupt, make([]byte, len(rec.Digest)) // as an audit leaves it
	must(t, e.st.Put(context.Background(), []byte(flagged), rec))
	e.kept = map[string][]byte{flagged: rec.Digest}

	before := e.h.snapshot()
	e.led.Lost(root)
	e.led.Written(filepath.Join(root, "d0", "tmp1"), 0, 0)
	e.led.DirRenamed(filepath.Join(root, "d1"))
	for _, p := range paths {
		e.ix.Changed(context.Background(), p)
	}
	e.settle(settleTimeout)
	if hashed := e.h.hashedSince(before); len(hashed) != 0 {
		t.Errorf("a rescan under a doubt hashed %v", hashed)
	}
	if k := e.found.kinds(); len(k) != 0 {
		t.Errorf("findings %v", k)
	}
}
