package store

import (
	"context"
	"testing"
)

// HasUnder answers for the records strictly under a directory, at any
// depth, and not for a sibling that shares the name's start.
func TestHasUnder(t *testing.T) {
	s := openTest(t)
	mustPut(t, s, "/a/b/c/f", rec("x", 1, 1, 1))
	mustPut(t, s, "/a/bc", rec("y", 1, 1, 2))
	for dir, want := range map[string]bool{"/": true, "/a": true, "/a/b": true, "/a/b/c": true,
		"/a/b/c/f": false, "/a/bc": false, "/a/b/c/g": false, "/z": false} {
		if got, err := s.HasUnder([]byte(dir)); err != nil || got != want {
			t.Errorf("HasUnder(%q) = %v, %v; want %v", dir, got, err, want)
		}
	}
	if err := s.SubmitAll(context.Background(), []Change{{Op: OpDelete, Path: []byte("/a/b/c/f")}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.HasUnder([]byte("/a/b")); err != nil || got {
		t.Errorf("HasUnder(/a/b) after its last record went = %v, %v; want false", got, err)
	}
	if _, err := s.HasUnder([]byte("a/b")); err == nil {
		t.Error("HasUnder of a relative path: no error")
	}
}
