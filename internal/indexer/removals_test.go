package indexer

import (
	"testing"
	"time"
)

// A removal taken off the list for the pipeline still counts as waiting
// until it is in the pipeline: Progress reads the removals before the
// queue, and must not see it in neither.
func TestRemovalCountsUntilQueued(t *testing.T) {
	r := newRemovals(time.Millisecond, &signal{})
	r.add("/r/a")
	paths, _ := r.due(time.Now().Add(time.Second))
	if len(paths) != 1 {
		t.Fatalf("due returned %v, want one path", paths)
	}
	if n := r.len(); n != 1 {
		t.Errorf("len = %d while the removal is on its way to the pipeline, want 1", n)
	}
	r.done()
	if n := r.len(); n != 0 {
		t.Errorf("len = %d once it is in the pipeline, want 0", n)
	}
	for i := range maxRemovals + 1 {
		if _, ok := r.add("/r/b"); ok != (i == maxRemovals) {
			t.Fatalf("add %d: over = %v", i, ok)
		}
	}
	if n := r.len(); n != maxRemovals+1 {
		t.Errorf("len = %d with the oldest of a full list handed over, want %d", n, maxRemovals+1)
	}
}
