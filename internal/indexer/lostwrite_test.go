package indexer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// uncleanIndex writes records into a new index and returns a copy of it
// taken while it was open: the copy's run marker says its writer never
// closed it, as a power cut leaves it. records maps a path to the content
// its record claims; the record takes the file's stat identity now.
func uncleanIndex(t *testing.T, records map[string]string) string {
	t.Helper()
	pastRacyTick() // hashed after their last change, as the hasher does
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "open.db"), store.Options{DataWindow: time.Hour})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	for p, claimed := range records {
		fi, err := fsstat.Lstat(p)
		must(t, err)
		sum := sha256.Sum256([]byte(claimed))
		now := time.Now().UnixNano()
		rec := store.Record{Backend: key.Default, Digest: sum[:], HashedAt: now, VerifiedAt: now, State: store.StateOK}
		rec.SetIdentity(identity(fi))
		must(t, st.Put(ctx, []byte(p), rec))
	}
	b, err := os.ReadFile(filepath.Join(dir, "open.db"))
	must(t, err)
	copyPath := filepath.Join(dir, "index.db")
	must(t, os.WriteFile(copyPath, b, 0o600))
	cancel()
	must(t, <-done)
	must(t, st.Close())
	return copyPath
}

type lostWrite struct {
	path     string
	was, now store.Record
}

// After an unclean end that ended the mount of their file system too (a
// power cut, a disk pulled out: the page cache lost what it held), the
// records hashed just before it are hashed again.
// One whose file holds other bytes under the same stat identity is a lost
// write, and OnFinding hears of it with both records, whether a lookup
// or the scan hashes it first; a file that still has the recorded bytes is
// not, and neither is one whose identity changed (an edit).
func TestLostWriteReported(t *testing.T) {
	img := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: loopfs.MinSize[loopfs.Ext4]})
	root := img.Path("root")
	must(t, os.Mkdir(root, 0o755))
	p := func(name string) string { return filepath.Join(root, name) }
	writeOld(t, p("lost.txt"), "disk bytes")
	writeOld(t, p("kept.txt"), "kept bytes")
	writeOld(t, p("edited.txt"), "old bytes!")
	writeOld(t, p("looked.txt"), "disk bytes")
	index := uncleanIndex(t, map[string]string{
		p("lost.txt"): "lost bytes", p("kept.txt"): "kept bytes", p("edited.txt"): "old bytes!", p("looked.txt"): "lost bytes",
	})
	img.Unmount(t)
	img.Mount(t)
	writeFile(t, p("edited.txt"), "new bytes!")

	var mu sync.Mutex
	got := map[string]lostWrite{}
	e := &env{t: t, root: root, index: index, done: make(chan struct{}), pause: make(chan bool)}
	h := &countingHasher{n: map[string]int{}, h: hasher.New(hasher.DefaultPolicy(), nil)}
	defer h.h.Close()
	st, err := store.Open(index, store.Options{})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	storeCtx, stopStore := context.WithCancel(context.Background())
	storeDone := make(chan error, 1)
	go func() { storeDone <- st.Run(storeCtx) }()
	ix, err := New(st, h, Options{Roots: []string{root}, OnFinding: func(f Finding) {
		mu.Lock()
		defer mu.Unlock()
		if f.Kind != FoundLostWrite {
			t.Errorf("%s: found %v", f.Path, f.Kind)
			return
		}
		got[f.Path] = lostWrite{f.Path, f.Was, f.Now}
	}})
	must(t, err)
	e.st, e.ix, e.h = st, ix, h
	// The lookup comes first: the indexer does not run yet.
	if r, err := ix.Lookup(ctx, p("looked.txt"), false); err != nil || r.State != Current {
		t.Fatalf("lookup: %+v, %v", r, err)
	}
	ixDone := make(chan error, 1)
	go func() { ixDone <- ix.Run(ctx) }()
	ix.Rescan(root)
	e.settle(30 * time.Second)
	cancel()
	must(t, <-ixDone)

	mu.Lock()
	defer mu.Unlock()
	lost, disk := sha256.Sum256([]byte("lost bytes")), sha256.Sum256([]byte("disk bytes"))
	for _, name := range []string{"lost.txt", "looked.txt"} {
		lw, ok := got[p(name)]
		if !ok {
			t.Errorf("%s: no lost write reported (reported: %v)", name, got)
			continue
		}
		if !bytes.Equal(lw.was.Digest, lost[:]) || !bytes.Equal(lw.now.Digest, disk[:]) || lw.now.Identity() != lw.was.Identity() {
			t.Errorf("%s: reported was %x, now %x", name, lw.was.Digest, lw.now.Digest)
		}
		if rec, _, _ := st.Get([]byte(p(name))); !bytes.Equal(rec.Digest, disk[:]) || rec.HashedAt != lw.now.HashedAt {
			t.Errorf("%s: the record is not the reported one of the bytes on disk: %+v", name, rec)
		}
	}
	for _, name := range []string{"kept.txt", "edited.txt"} {
		if _, ok := got[p(name)]; ok {
			t.Errorf("%s reported as a lost write", name)
		}
	}
	if n := h.count(p("kept.txt")); n != 1 {
		t.Errorf("kept.txt hashed %d times after the unclean end, want 1", n)
	}
	if n := h.count(p("looked.txt")); n != 1 {
		t.Errorf("looked.txt hashed %d times after the unclean end, want 1 (by the lookup)", n)
	}
	stopStore()
	must(t, <-storeDone)
	must(t, st.Close())
}
