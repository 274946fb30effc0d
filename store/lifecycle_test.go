package store

import (
	"context"
	"errors"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// Every done is called exactly once, whether the change was committed
// before Close or refused after it, with submitters racing Close.
func TestSubmitRacingClose(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "index.db"), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	var (
		wg             sync.WaitGroup
		calls, commits atomic.Int64
	)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				s.Submit(Change{Op: OpPut, Path: p("/g%d/f%d", g, i), Record: rec("x", 1, 1, uint64(i))}, func(err error) {
					calls.Add(1)
					if err == nil {
						commits.Add(1)
					} else if !errors.Is(err, ErrClosed) {
						t.Errorf("done: %v", err)
					}
				})
			}
		}()
	}
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if calls.Load() != 8000 {
		t.Fatalf("done called %d times for 8000 changes", calls.Load())
	}
	s = openTestAt(t, s.Path(), Options{})
	st, _ := s.Stats()
	if st.Files != commits.Load() {
		t.Fatalf("%d records, %d changes acknowledged", st.Files, commits.Load())
	}
}

func TestRunTwiceAndAfterClose(t *testing.T) {
	s := openTest(t)
	mustPut(t, s, "/a", rec("a", 1, 1, 1)) // the writer is running now
	if err := s.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Run = %v", err)
	}
	s2, err := Open(filepath.Join(t.TempDir(), "index.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if err := s2.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close = %v", err)
	}
	if _, _, err := s2.Get([]byte("/a")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v", err)
	}
}

// The package imports only the standard library (and x/sys/unix beside
// it), bbolt, key, fsstat and its own packages (store/...): nothing above
// it in the data flow.
func TestImportsPointDown(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			switch {
			case !strings.Contains(strings.Split(path, "/")[0], "."): // standard library
			case path == "golang.org/x/sys/unix": // system calls, as the standard library's
			case path == "go.etcd.io/bbolt", path == "go.etcd.io/bbolt/errors":
			case path == "github.com/annexd/annexd/key", path == "github.com/annexd/annexd/fsstat":
			case strings.HasPrefix(path, "github.com/annexd/annexd/store/"):
			default:
				t.Errorf("%s imports %s", f, path)
			}
		}
	}
}

// Readers filling the directory caches while directories are renamed,
// removed and re-created never make a later Get miss an acknowledged
// change.
func TestDirCachesFollowChanges(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	mustPut(t, s, "/x/d/f", rec("f", 1, 1, 1))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, p := range []string{"/x/d/f", "/x/e/f", "/x/d/g"} {
					if _, _, err := s.Get([]byte(p)); err != nil {
						t.Error(err)
						return
					}
				}
				_ = s.Subtree(ctx, []byte("/x"), func([]byte, Record) error { return nil })
			}
		}()
	}
	expect := func(path string, want bool) {
		t.Helper()
		if _, ok, err := s.Get([]byte(path)); ok != want || err != nil {
			t.Fatalf("Get(%s) = %v, %v; want %v", path, ok, err, want)
		}
	}
	for range 40 {
		if _, err := s.Move(ctx, []byte("/x/d"), []byte("/x/e")); err != nil {
			t.Fatal(err)
		}
		expect("/x/d/f", false)
		expect("/x/e/f", true)
		if _, err := s.Move(ctx, []byte("/x/e"), []byte("/x/d")); err != nil {
			t.Fatal(err)
		}
		expect("/x/e/f", false)
		expect("/x/d/f", true)
		if err := s.DeleteSubtree(ctx, []byte("/x/d")); err != nil {
			t.Fatal(err)
		}
		expect("/x/d/f", false)
		mustPut(t, s, "/x/d/g", rec("g", 1, 1, 2))
		mustPut(t, s, "/x/d/f", rec("f", 1, 1, 1))
		expect("/x/d/g", true)
		if err := s.SubmitAll(ctx, []Change{{Op: OpDelete, Path: []byte("/x/d/g")}}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// A namer kept across the transactions of one long read names a file by
// its directory's new name once the directory was renamed in between.
func TestNamerFollowsRenames(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	mustPut(t, s, "/x/d/f", rec("f", 1, 1, 1))
	n := s.newNamer()
	name := func() string {
		t.Helper()
		var got []byte
		err := n.view(func(tx *bolt.Tx, n *namer) error {
			fk, _ := tx.Bucket(codec.BucketFiles).Cursor().First()
			var err error
			got, err = n.path(fk)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return string(got)
	}
	for i := range 4 {
		from, to := "/x/d", "/x/e"
		if i%2 == 1 {
			from, to = to, from
		}
		if got := name(); got != from+"/f" {
			t.Fatalf("before move %d: %q, want %q", i, got, from+"/f")
		}
		if _, err := s.Move(ctx, []byte(from), []byte(to)); err != nil {
			t.Fatal(err)
		}
		if got := name(); got != to+"/f" {
			t.Fatalf("after move %d: %q, want %q", i, got, to+"/f")
		}
	}
}
