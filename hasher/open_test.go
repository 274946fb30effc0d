package hasher

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/key"
)

// Open refuses what is not a regular file, without blocking on a FIFO and
// without following a symlink, and keeps no descriptor of it.
func TestOpenRefusesNonRegular(t *testing.T) {
	o := makeOddFiles(t)
	for _, p := range []string{o.fifo, o.link, "/dev/null", o.dir} {
		done := make(chan error, 1)
		go func() {
			f, err := Open(p)
			if err == nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s: got %v, want ErrNotRegular", p, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Open blocked", p)
		}
	}
	if _, err := Open(o.sock); !errors.Is(err, unix.ENXIO) { // a socket cannot be opened
		t.Errorf("socket: got %v, want ENXIO", err)
	}
	if _, err := Open(filepath.Join(o.dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want ErrNotExist", err)
	}
	if open := openOf(t, []string{o.fifo, o.target, o.dir}); len(open) != 0 {
		t.Errorf("descriptors left open: %v", open)
	}
}

// The identity HashOpen checks after reading is the descriptor's at Open:
// a file rewritten in between fails with ErrChanged, on every route.
func TestHashOpenChangedSinceOpen(t *testing.T) {
	for name, p := range everyRoute(t) {
		t.Run(name, func(t *testing.T) {
			paths, _ := makeFiles(t, 1, 3000)
			h := New(p, nil)
			defer h.Close()
			f, err := Open(paths[0])
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, paths[0], pattern(3001)) // a new size: changed on any clock
			if res, err := h.HashOpen(context.Background(), f, key.SHA256); !errors.Is(err, ErrChanged) {
				t.Fatalf("digest %x, error %v; want ErrChanged", res.Digest, err)
			}
			if open := openOf(t, paths); len(open) != 0 {
				t.Errorf("files left open: %v", open)
			}
		})
	}
}

// HashOpen takes the file over: Close afterwards does nothing, and the
// same File cannot be hashed twice. A File closed unhashed is refused.
func TestHashOpenTakesTheFile(t *testing.T) {
	paths, _ := makeFiles(t, 2, 100)
	h := New(Policy{}, nil)
	defer h.Close()
	f, err := Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.HashOpen(context.Background(), f, key.SHA256); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := h.HashOpen(context.Background(), f, key.SHA256); err == nil {
		t.Error("a File hashed twice")
	}
	g, err := Open(paths[1])
	if err != nil {
		t.Fatal(err)
	}
	if open := openOf(t, paths[1:]); len(open) != 1 {
		t.Fatalf("Open holds %d descriptors of the file, want 1", len(open))
	}
	g.Close()
	g.Close()
	if _, err := h.HashOpen(context.Background(), g, key.SHA256); err == nil {
		t.Error("a closed File was hashed")
	}
	if open := openOf(t, paths); len(open) != 0 {
		t.Errorf("files left open: %v", open)
	}
}

// A File that HashOpen refuses or does not finish is closed all the same:
// an unknown backend, a closed Hasher, a context already done (on every
// route).
func TestHashOpenRefusedClosesTheFile(t *testing.T) {
	paths, _ := makeFiles(t, 1, 300<<10)
	open := func(t *testing.T) *File {
		t.Helper()
		f, err := Open(paths[0])
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	noneOpen := func(t *testing.T, what string) {
		t.Helper()
		if left := openOf(t, paths); len(left) != 0 {
			t.Errorf("%s: file left open", what)
		}
	}
	h := New(Policy{}, nil)
	if _, err := h.HashOpen(context.Background(), open(t), key.Unknown); !errors.Is(err, ErrBackend) {
		t.Errorf("unknown backend: %v", err)
	}
	noneOpen(t, "unknown backend")
	h.Close()
	if _, err := h.HashOpen(context.Background(), open(t), key.SHA256); !errors.Is(err, ErrClosed) {
		t.Errorf("closed Hasher: %v", err)
	}
	noneOpen(t, "closed Hasher")
	for name, p := range everyRoute(t) {
		h := New(p, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := h.HashOpen(ctx, open(t), key.SHA256); !errors.Is(err, context.Canceled) {
			t.Errorf("%s, cancelled: %v", name, err)
		}
		h.Close()
		noneOpen(t, name+", cancelled")
	}
}
