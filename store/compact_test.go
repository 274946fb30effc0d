package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// snapshot returns every record of s by path.
func snapshot(t *testing.T, s *Store) map[string]Record {
	t.Helper()
	out := map[string]Record{}
	if err := s.Subtree(context.Background(), []byte("/"), func(path []byte, r Record) error {
		out[string(path)] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCompact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	var cs []Change
	for i := range 3000 {
		cs = append(cs, Change{Op: OpPut, Path: p("/d%d/f%d", i%50, i), Record: rec(string(rune('a'+i%300)), int64(i%300), 1, uint64(i+1))})
	}
	for i := 0; i < 3000; i += 3 {
		cs = append(cs, Change{Op: OpDelete, Path: p("/d%d/f%d", i%50, i)})
	}
	if err := s.SubmitAll(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, s)
	if err := s.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantStats, _ := s.Stats()
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The copy a crashed compaction left behind.
	leftover := filepath.Join(filepath.Dir(path), ".index.db.compact-123")
	if err := os.WriteFile(leftover, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Compact(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Replaced || res.After <= 0 || res.After >= res.Before || res.Files != int64(len(want)) {
		t.Errorf("Compact: %+v, want a smaller file with %d records", res, len(want))
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".index.db.compact-*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
	s = openTestAt(t, path, Options{NoSync: true}) // checked again at cleanup
	got := snapshot(t, s)
	if len(got) != len(want) {
		t.Fatalf("%d records after compaction, want %d", len(got), len(want))
	}
	for k, r := range want {
		if g, ok := got[k]; !ok || !g.Equal(&r) {
			t.Fatalf("%s: %+v after compaction, want %+v", k, g, r)
		}
	}
	st, _ := s.Stats()
	if st.Files != wantStats.Files || st.DupGroups != wantStats.DupGroups || st.Duplicate != wantStats.Duplicate {
		t.Errorf("stats %+v, want %+v", st, wantStats)
	}
	// New directories still get fresh ids: the sequence was copied. With
	// it lost, /new/ would share the id of /d0/, the first directory made,
	// and hold its files too.
	mustPut(t, s, "/new/x", rec("content of x", 1, 1, 99999))
	var under []string
	if err := s.Subtree(context.Background(), p("/new"), func(path []byte, _ Record) error {
		under = append(under, string(path))
		return nil
	}); err != nil || len(under) != 1 {
		t.Errorf("/new holds %q (%v), want only /new/x", under, err)
	}
	if _, ok, _ := s.Get(p("/d1/f1")); !ok {
		t.Error("old record lost after a put")
	}
}

func TestCompactLockedOrCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s := openTestAt(t, path, Options{NoSync: true})
	mustPut(t, s, "/a", rec("a", 1, 1, 1))
	if _, err := Compact(path, Options{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Errorf("Compact of an open index: %v, want ErrLocked", err)
	}
	if _, err := Compact(filepath.Join(t.TempDir(), "none.db"), Options{}); !errors.Is(err, ErrNoIndex) {
		t.Error("Compact of a missing index made one")
	}
}

// TestOpenAfterReplace: an opener that waited for the lock of a file that
// was then replaced (as Compact does) opens the new file, not the old one.
func TestOpenAfterReplace(t *testing.T) {
	dir := t.TempDir()
	path, other := filepath.Join(dir, "index.db"), filepath.Join(dir, "other.db")
	s2, err := Open(other, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s2)
	mustPut(t, s2, "/new", rec("n", 1, 1, 1))
	stop()
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	holder, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	type opened struct {
		s   *Store
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		s, err := Open(path, Options{NoSync: true, LockTimeout: 10 * time.Second})
		ch <- opened{s, err}
	}()
	time.Sleep(100 * time.Millisecond) // the opener is now waiting for the old file's lock
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	o := <-ch
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer o.s.Close()
	if _, ok, err := o.s.Get(p("/new")); !ok || err != nil {
		t.Errorf("the waiting opener did not get the file now at the path (%v)", err)
	}
}

// Compact through a symlink replaces the file the link points to, keeps
// the link and the index's permissions.
func TestCompactThroughSymlink(t *testing.T) {
	real := makeIndex(t, 10)
	if err := os.Chmod(real, 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "index.db")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if res, err := Compact(link, Options{}); err != nil || !res.Replaced {
		t.Fatalf("Compact through a link: %+v %v", res, err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode().Type() != os.ModeSymlink {
		t.Fatalf("the link was replaced: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(real); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("compacted index mode %v (%v), want 0640", fi.Mode(), err)
	}
	if st, _ := openTestAt(t, link, Options{}).Stats(); st.Files != 10 {
		t.Fatalf("after Compact through a link: %d files", st.Files)
	}
}
