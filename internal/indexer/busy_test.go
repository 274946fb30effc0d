package indexer

import (
	"path/filepath"
	"testing"
	"time"
)

// A path is busy from the change that queues it until its record is
// written, and not before or after.
func TestBusy(t *testing.T) {
	root := t.TempDir()
	f := filepath.Join(root, "f.txt")
	writeFile(t, f, "one") // before the first scan: nothing else tells of it
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(time.Minute)
	if e.ix.Busy(f) {
		t.Fatal("settled file is busy")
	}
	entered, release := e.h.hold(f)
	writeOld(t, f, "two")
	e.ix.Changed(t.Context(), f)
	<-entered
	if !e.ix.Busy(f) || !e.ix.Busy(f+"/") {
		t.Fatal("file being hashed is not busy")
	}
	if e.ix.Busy(filepath.Join(e.root, "other")) {
		t.Fatal("a path never queued is busy")
	}
	close(release)
	waitFor(t, "the file leaves the pipeline", func() bool { return !e.ix.Busy(f) })
	e.settle(time.Minute)
}
