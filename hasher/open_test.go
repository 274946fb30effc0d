package hasher

import (
	"context"
	"encoding/hex"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/key"
)

// A file opened by Open hashes to the known answers on every route, with
// the identity of an lstat, and HashOpen leaves no descriptor open.
func TestHashOpenKnownAnswersEveryRoute(t *testing.T) {
	paths := knownAnswerFiles(t)
	for name, p := range everyRoute(t) {
		t.Run(name, func(t *testing.T) {
			h := New(p, nil)
			defer h.Close()
			for _, b := range key.Backends() {
				for i, path := range paths {
					f, err := Open(path)
					if err != nil {
						t.Fatal(err)
					}
					res, err := h.HashOpen(context.Background(), f, b)
					if err != nil {
						t.Fatalf("%s %s: %v", b, path, err)
					}
					if got, want := hex.EncodeToString(res.Digest), knownAnswers[b.Base()][i]; got != want {
						t.Errorf("%s %s: got %s want %s", b, filepath.Base(path), got, want)
					}
					fi, err := fsstat.Lstat(path)
					if err != nil || !res.Info.Same(fi) {
						t.Errorf("%s: result identity %+v, lstat %+v (%v)", path, res.Info, fi, err)
					}
				}
			}
			if open := openOf(t, paths); len(open) != 0 {
				t.Errorf("files left open: %v", open)
			}
		})
	}
}

// Open refuses what is not a regular file, without blocking on a FIFO and
// without following a symlink, and keeps no descriptor of it.
func TestOpenRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	target := filepath.Join(dir, "target.txt")
	writeFile(t, target, []byte("abc"))
	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, link, "/dev/null", dir} {
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
	if _, err := Open(sock); !errors.Is(err, unix.ENXIO) { // a socket cannot be opened
		t.Errorf("socket: got %v, want ENXIO", err)
	}
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want ErrNotExist", err)
	}
	if open := openOf(t, []string{fifo, target, dir}); len(open) != 0 {
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
