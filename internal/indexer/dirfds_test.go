package indexer

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/key"
)

// openUnder counts this process's open descriptors of root and what is
// below it, so that other tests' leftovers do not count.
func openUnder(t *testing.T, root string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot list /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		if to, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && (to == root || strings.HasPrefix(to, root+"/")) {
			n++
		}
	}
	return n
}

// Files opened through their directory's descriptor are the files at
// their paths; the directories stay open for the next file, at most
// maxDirFds of them, and closeAll closes every one.
func TestDirFdsOpenThroughTheDirectory(t *testing.T) {
	root := t.TempDir()
	for i := range maxDirFds + 8 {
		for j := range 2 {
			writeOld(t, filepath.Join(root, fmt.Sprintf("d%d/f%d", i, j)), fmt.Sprintf("file %d of %d", j, i))
		}
	}
	var d dirFds
	for i := range maxDirFds + 8 {
		for j := range 2 {
			p := filepath.Join(root, fmt.Sprintf("d%d/f%d", i, j))
			f, err := d.open(p)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := fsstat.Lstat(p)
			if err != nil || !f.Info().Same(fi) || f.Path() != p {
				t.Errorf("%s: opened %+v as %q, lstat %+v %v", p, f.Info(), f.Path(), fi, err)
			}
			f.Close()
		}
		if got, want := d.held(), min(i+1, maxDirFds); got != want {
			t.Fatalf("after %d directories %d are held, want %d", i+1, got, want)
		}
	}
	if got := openUnder(t, root); got != maxDirFds {
		t.Errorf("%d descriptors open under the tree, want the %d directories held", got, maxDirFds)
	}
	d.closeAll()
	if got := openUnder(t, root); got != 0 || d.held() != 0 {
		t.Errorf("after closeAll %d descriptors are open under the tree, %d directories held", got, d.held())
	}
}

// A held directory that was renamed, with a new one of the same name in
// its place, opens the old file; hashing it fails as changed, since the
// path names another file now, and a retry by the path hashes the new one.
// A file the descriptor cannot open drops the directory.
func TestDirFdsStaleDirectory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a")
	p := filepath.Join(dir, "f")
	writeOld(t, p, "old content")
	writeOld(t, filepath.Join(dir, "g"), "another")
	var d dirFds
	defer d.closeAll()
	f, err := d.open(filepath.Join(dir, "g"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Rename(dir, filepath.Join(root, "moved")); err != nil {
		t.Fatal(err)
	}
	writeOld(t, p, "new content, another size")
	h := hasher.New(hasher.DefaultPolicy(), nil)
	defer h.Close()
	f, err = d.open(p)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := h.HashOpen(context.Background(), f, key.SHA256E); !errors.Is(err, hasher.ErrChanged) {
		t.Fatalf("hashing the renamed directory's file for %s: %x, %v; want ErrChanged", p, res.Digest, err)
	}
	res, err := h.Hash(context.Background(), p, key.SHA256E)
	if want := sha256.Sum256([]byte("new content, another size")); err != nil || string(res.Digest) != string(want[:]) {
		t.Errorf("retry by path: %x, %v", res.Digest, err)
	}
	if err := os.Remove(filepath.Join(root, "moved", "g")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.open(filepath.Join(dir, "g")); err == nil {
		t.Errorf("opened a file that is nowhere")
	}
	if d.held() != 0 {
		t.Errorf("%d directories held after a failed open, want it dropped", d.held())
	}
}
