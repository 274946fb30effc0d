package durable

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// A file made once stays as the first maker wrote it; no temporary file
// is left beside it.
func TestCreateFileOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "key")
	if err := CreateFile(path, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := CreateFile(path, []byte("second")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("a second maker: %v, want fs.ErrExist", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "first" {
		t.Fatalf("the file holds %q (%v), want the first maker's", b, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("%d entries beside the file, want it alone", len(ents))
	}
}
