package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// indexWithMeta is makeIndex with a user meta value "calib".
func indexWithMeta(t *testing.T, n int, calib []byte) string {
	t.Helper()
	path := makeIndex(t, n)
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	if err := s.PutMeta(context.Background(), "calib", calib); err != nil {
		t.Fatal(err)
	}
	stop()
	s.Close()
	return path
}

// A damaged index is moved aside byte for byte; the new index at its path
// opens, is empty and holds the meta value asked for.
func TestMoveAsideKeepsDamagedFileAndMeta(t *testing.T) {
	for _, size := range []int{100, 5000} { // an inline and a page-sized value
		calib := bytes.Repeat([]byte("c"), size)
		path := indexWithMeta(t, 3000, calib)
		leaves := filesLeaves(t, path)
		_, ps := treePages(t, path)
		overwritePage(t, path, int(leaves[len(leaves)/2]), ps, make([]byte, ps))
		if _, err := Open(path, Options{}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open of the damaged index = %v", err)
		}
		damaged, _ := os.ReadFile(path)

		a, err := MoveAside(path, []string{"calib", "absent"})
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(a.Path) != filepath.Dir(path) || !strings.HasPrefix(filepath.Base(a.Path), "index.db.damaged-") {
			t.Errorf("moved to %q", a.Path)
		}
		if b, _ := os.ReadFile(a.Path); !bytes.Equal(b, damaged) {
			t.Errorf("%s differs from the damaged index", a.Path)
		}
		if len(a.Kept) != 1 || a.Kept[0] != "calib" {
			t.Errorf("kept %v, want [calib]", a.Kept)
		}
		s := openTestAt(t, path, Options{NoSync: true})
		if st, err := s.Stats(); err != nil || st.Files != 0 {
			t.Errorf("new index: %+v %v, want empty", st, err)
		}
		if v, ok, err := s.GetMeta("calib"); err != nil || !ok || !bytes.Equal(v, calib) {
			t.Errorf("new index's calib: %d bytes, %v %v", len(v), ok, err)
		}
	}
}

// A value on a damaged page is not kept; the index is still moved aside.
func TestMoveAsideLosesOnlyWhatIsDamaged(t *testing.T) {
	path := indexWithMeta(t, 100, bytes.Repeat([]byte("c"), pageSize/2)) // too large to be inline
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var root int
	_ = db.View(func(tx *bolt.Tx) error { root = int(tx.Bucket(codec.BucketUser).Root()); return nil })
	ps := db.Info().PageSize
	db.Close()
	if root == 0 {
		t.Fatal("the user bucket is inline; the test needs its own page")
	}
	overwritePage(t, path, root, ps, bytes.Repeat([]byte{0xAB}, ps))
	a, err := MoveAside(path, []string{"calib"})
	if err != nil || a.Path == "" || len(a.Kept) != 0 {
		t.Fatalf("MoveAside = %+v, %v; want moved, nothing kept", a, err)
	}
}

func TestMoveAsideRefuses(t *testing.T) {
	t.Run("held", func(t *testing.T) {
		path := makeIndex(t, 10)
		s, err := Open(path, Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := MoveAside(path, nil); !errors.Is(err, ErrLocked) {
			t.Errorf("MoveAside of an index in use = %v, want ErrLocked", err)
		}
		if m, _ := filepath.Glob(path + ".damaged-*"); len(m) != 0 {
			t.Errorf("moved although in use: %v", m)
		}
	})
	t.Run("not an index", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "thesis.pdf")
		if err := os.WriteFile(path, bytes.Repeat([]byte("%PDF"), 2000), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := MoveAside(path, nil); !errors.Is(err, ErrNotIndex) {
			t.Errorf("MoveAside of a PDF = %v, want ErrNotIndex", err)
		}
	})
	t.Run("another program's bbolt", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "other.db")
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("theirs")); return err })
		db.Close()
		if _, err := MoveAside(path, nil); !errors.Is(err, ErrNotIndex) {
			t.Errorf("MoveAside of another program's database = %v, want ErrNotIndex", err)
		}
	})
}

// Without an index there is nothing to move: a new one is made.
func TestMoveAsideWithoutIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "index.db")
	a, err := MoveAside(path, []string{"calib"})
	if err != nil || a.Path != "" {
		t.Fatalf("MoveAside without an index = %+v, %v", a, err)
	}
	openTestAt(t, path, Options{NoSync: true})
}
