package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/annexd/annexd/key"
)

// outsideIndex opens a fresh index file with its writer running and puts
// a record at each path (distinct content each).
func outsideIndex(t testing.TB, paths ...string) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "index.db"), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if rep, err := s.Check(); err != nil || len(rep.Problems) > 0 {
			t.Errorf("Check: %v %v", err, rep.Problems)
		}
		s.Close()
	})
	outsidePut(t, s, paths...)
	return s
}

// outsidePut stores records at paths in group commits.
func outsidePut(t testing.TB, s *Store, paths ...string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(paths))
	for i, p := range paths {
		d := sha256.Sum256([]byte(p))
		r := Record{Backend: key.SHA256E, Digest: d[:], Size: 1, MtimeNs: 1, CtimeNs: 1, Dev: 1, Ino: uint64(i + 1), HashedAt: 2}
		wg.Add(1)
		s.Submit(Change{Op: OpPut, Path: []byte(p), Record: r}, func(err error) {
			if err != nil {
				errs <- fmt.Errorf("put %s: %w", p, err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func bs(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func outsideString(ds []OutsideDir) string {
	s := ""
	for _, d := range ds {
		s += fmt.Sprintf("%s direct=%v dirs=%d files=%d\n", d.Dir, d.Direct, d.Dirs, d.Files)
	}
	return s
}

func TestOutside(t *testing.T) {
	s := outsideIndex(t,
		"/rootfile",
		"/home/u/a.txt", "/home/u/b.txt",
		"/home/u/Photos/x.jpg", "/home/u/Photos/2020/y.jpg",
		"/home/u/Photos.bak/q", // sorts before "Photos/"
		"/home/u/Photos0/z",    // sorts right after Photos' subtree
		"/home/u/Docs/a", "/home/u/Docs/b/c", "/home/u/Docs/b/d/e", "/home/u/Docs/b/d/f",
		"/srv/keep/f", "/srv/old/g",
		"/tmp/x/y",
	)
	ctx := context.Background()
	roots := bs("/home/u/Photos", "/srv/keep")
	got, err := s.Outside(ctx, roots, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "" +
		"/ direct=true dirs=1 files=1\n" +
		"/home/u direct=true dirs=1 files=2\n" +
		"/home/u/Docs direct=false dirs=3 files=4\n" +
		"/home/u/Photos.bak direct=false dirs=1 files=1\n" +
		"/home/u/Photos0 direct=false dirs=1 files=1\n" +
		"/srv/old direct=false dirs=1 files=1\n" +
		"/tmp direct=false dirs=1 files=1\n"
	if g := outsideString(got); g != want {
		t.Errorf("Outside:\n%s\nwant:\n%s", g, want)
	}

	got, err = s.Outside(ctx, roots, false)
	if err != nil || len(got) != 7 || got[2].Files != -1 || got[2].Dirs != 3 {
		t.Errorf("Outside without counting: %v\n%s", err, outsideString(got))
	}

	// A root inside another, and "/" covering everything.
	got, err = s.Outside(ctx, bs("/home/u/Photos/2020", "/", "/srv"), true)
	if err != nil || len(got) != 0 {
		t.Errorf("Outside of / = %s, %v; want nothing", outsideString(got), err)
	}
	got, _ = s.Outside(ctx, bs("/home/u/Photos/2020", "/home"), true)
	if g, w := outsideString(got), "/ direct=true dirs=1 files=1\n/srv direct=false dirs=2 files=2\n/tmp direct=false dirs=1 files=1\n"; g != w {
		t.Errorf("Outside of /home:\n%s\nwant:\n%s", g, w)
	}
	// No roots: everything is outside, as one entry.
	got, _ = s.Outside(ctx, nil, true)
	if g, w := outsideString(got), "/ direct=false dirs=12 files=14\n"; g != w {
		t.Errorf("Outside of no roots = %s, want %s", g, w)
	}
	if _, err := s.Outside(ctx, bs("rel/dir"), false); !errors.Is(err, ErrPath) {
		t.Errorf("Outside with a relative root: %v, want ErrPath", err)
	}

	// After forgetting what it listed, nothing is outside.
	for _, d := range []string{"/home/u/Docs", "/home/u/Photos.bak", "/home/u/Photos0", "/srv/old", "/tmp"} {
		if err := s.DeleteSubtree(ctx, []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"/", "/home/u"} {
		var ps [][]byte
		if err := s.Direct(ctx, []byte(d), func(p []byte, _ Record) error { ps = append(ps, p); return nil }); err != nil {
			t.Fatal(err)
		}
		var cs []Change
		for _, p := range ps {
			cs = append(cs, Change{Op: OpDelete, Path: p})
		}
		if err := s.SubmitAll(ctx, cs); err != nil {
			t.Fatal(err)
		}
	}
	got, err = s.Outside(ctx, roots, true)
	if err != nil || len(got) != 0 {
		t.Errorf("Outside after forgetting = %s, %v", outsideString(got), err)
	}
	if st, _ := s.Stats(); st.Files != 3 {
		t.Errorf("%d records left, want the 3 under the roots", st.Files)
	}
}

func TestDirect(t *testing.T) {
	s := outsideIndex(t, "/a/x", "/a/y", "/a/b/z", "/a/b/w", "/a.b/v", "/ab")
	ctx := context.Background()
	var got []string
	err := s.Direct(ctx, []byte("/a"), func(p []byte, _ Record) error { got = append(got, string(p)); return nil })
	if err != nil || fmt.Sprint(got) != "[/a/x /a/y]" {
		t.Errorf("Direct(/a) = %v, %v", got, err)
	}
	got = nil
	err = s.Direct(ctx, []byte("/"), func(p []byte, _ Record) error { got = append(got, string(p)); return ErrStop })
	if err != nil || fmt.Sprint(got) != "[/ab]" {
		t.Errorf("Direct(/) with ErrStop = %v, %v", got, err)
	}
	got = nil
	err = s.Direct(ctx, []byte("/a/x"), func(p []byte, _ Record) error { got = append(got, string(p)); return nil })
	if err != nil || len(got) != 0 {
		t.Errorf("Direct of a file = %v, %v", got, err)
	}
}

// TestOutsideAcrossChunks lists more directories than one read
// transaction takes, inside and outside a root.
func TestOutsideAcrossChunks(t *testing.T) {
	var paths []string
	for i := range 2*chunk + 100 {
		paths = append(paths, fmt.Sprintf("/old/d%05d/f", i))
	}
	for i := range chunk + 10 {
		paths = append(paths, fmt.Sprintf("/keep/d%05d/f", i))
	}
	paths = append(paths, "/older/f")
	s := outsideIndex(t, paths...)
	got, err := s.Outside(context.Background(), bs("/keep"), true)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("/old direct=false dirs=%d files=%d\n/older direct=false dirs=1 files=1\n", 2*chunk+100, 2*chunk+100)
	if g := outsideString(got); g != want {
		t.Errorf("Outside:\n%s\nwant:\n%s", g, want)
	}
}

// BenchmarkOutside lists the 100 directories outside a root that holds
// 1,000 or 20,000: the cost should follow the outside ones alone.
func BenchmarkOutside(b *testing.B) {
	for _, inside := range []int{1000, 20000} {
		b.Run(fmt.Sprintf("inside=%d", inside), func(b *testing.B) {
			var paths []string
			for i := range inside {
				paths = append(paths, fmt.Sprintf("/home/u/Photos/d%05d/f", i))
			}
			for i := range 100 {
				paths = append(paths, fmt.Sprintf("/home/u/old%03d/f", i))
			}
			s := outsideIndex(b, paths...)
			roots := bs("/home/u/Photos")
			b.ResetTimer()
			for b.Loop() {
				got, err := s.Outside(context.Background(), roots, false)
				if err != nil || len(got) != 100 {
					b.Fatal(len(got), err)
				}
			}
		})
	}
}
