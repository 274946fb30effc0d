package indexer

import (
	"path/filepath"
	"testing"
	"time"
)

// A path is busy from the change that queues it until its record is
// written, and not before or after.
func TestBusy(t *testing.T) {
	e := newEnv(t, "", envOpts{noWatch: true})
	f := filepath.Join(e.root, "f.txt")
	writeFile(t, f, "one")
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
