package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// PutIf writes while the record is the one it was made from, keeping the
// stored generation; after another write or a removal it changes nothing
// and says ErrConflict, without failing the other changes of its group.
func TestPutIf(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	old := rec("a", 1, 7, 1)
	old.Generation = 5
	mustPut(t, s, "/d/a", old)

	verified := old
	verified.VerifiedAt = old.HashedAt + 1e9
	verified.Generation = 0
	if err := s.PutIf(ctx, []byte("/d/a"), verified, old); err != nil {
		t.Fatal(err)
	}
	got, _, _ := s.Get([]byte("/d/a"))
	if got.VerifiedAt != verified.VerifiedAt || got.Generation != 5 {
		t.Fatalf("after PutIf: %+v", got)
	}

	// The indexer hashed the file again: a finding made from the old
	// record is refused.
	fresh := rec("a2", 1, 7, 1)
	fresh.HashedAt = old.HashedAt + 2e9
	mustPut(t, s, "/d/a", fresh)
	corrupt := old
	corrupt.State = StateCorrupt
	if err := s.PutIf(ctx, []byte("/d/a"), corrupt, old); !errors.Is(err, ErrConflict) {
		t.Fatalf("PutIf over a newer record = %v", err)
	}
	if got, _, _ := s.Get([]byte("/d/a")); !got.SameContent(&fresh) {
		t.Fatalf("PutIf changed a newer record: %+v", got)
	}
	if err := s.PutIf(ctx, []byte("/d/none"), corrupt, old); !errors.Is(err, ErrConflict) {
		t.Fatalf("PutIf of a path without a record = %v", err)
	}

	// In one group with other changes.
	errs := make([]error, 3)
	var wg sync.WaitGroup
	wg.Add(3)
	for i, c := range []Change{
		{Op: OpPut, Path: []byte("/d/b"), Record: rec("b", 2, 7, 2)},
		{Op: OpPutIf, Path: []byte("/d/a"), Record: corrupt, Expect: old},
		{Op: OpPut, Path: []byte("/d/c"), Record: rec("c", 3, 7, 3)},
	} {
		s.Submit(c, func(err error) { errs[i] = err; wg.Done() })
	}
	wg.Wait()
	if errs[0] != nil || !errors.Is(errs[1], ErrConflict) || errs[2] != nil {
		t.Fatalf("group with a conflict: %v", errs)
	}
	for _, p := range []string{"/d/b", "/d/c"} {
		if _, ok, _ := s.Get([]byte(p)); !ok {
			t.Fatalf("%s lost with the conflict in its group", p)
		}
	}
}

// An audit that keeps verifying what it read while the indexer keeps
// writing new records never replaces one of them: the last record is the
// indexer's last, whatever the interleaving.
func TestPutIfRacesWriter(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	path := []byte("/race/f")
	const writes = 300
	mustPut(t, s, string(path), rec("v0", 1, 7, 1))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 1; i <= writes; i++ {
			r := rec(fmt.Sprintf("v%d", i), 1, 7, 1)
			r.HashedAt += int64(i)
			r.VerifiedAt = r.HashedAt
			if err := s.Put(ctx, path, r); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	applied, refused := 0, 0
	go func() {
		defer wg.Done()
		for range 2 * writes {
			r, ok, err := s.Get(path)
			if err != nil || !ok {
				t.Error(err, ok)
				return
			}
			v := r
			v.State = StateCorrupt
			switch err := s.PutIf(ctx, path, v, r); {
			case err == nil:
				applied++
			case errors.Is(err, ErrConflict):
				refused++
			default:
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	t.Logf("audit findings applied %d, refused %d", applied, refused)
	last := rec(fmt.Sprintf("v%d", writes), 1, 7, 1)
	last.HashedAt += writes
	got, _, _ := s.Get(path)
	if got.HashedAt != last.HashedAt || string(got.Digest) != string(last.Digest) {
		t.Fatalf("final record hashed at %d, want the indexer's last (%d)", got.HashedAt, last.HashedAt)
	}
}

// MetaPrefix lists exactly the names under a prefix, in order, across
// chunks, and lets its callback write.
func TestMetaPrefix(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	var cs []Change
	for i := range 2500 {
		cs = append(cs, Change{Op: OpPutMeta, Path: p("audit/p/%05d", i), Value: p("v%d", i)})
	}
	cs = append(cs, Change{Op: OpPutMeta, Path: []byte("audit/q"), Value: []byte("x")},
		Change{Op: OpPutMeta, Path: []byte("audit/"), Value: []byte("y")},
		Change{Op: OpPutMeta, Path: []byte("audit/p"), Value: []byte("z")})
	submit(t, s, cs)
	n := 0
	err := s.MetaPrefix(ctx, "audit/p/", func(name string, v []byte) error {
		if want := fmt.Sprintf("audit/p/%05d", n); name != want || string(v) != fmt.Sprintf("v%d", n) {
			t.Fatalf("entry %d: %q = %q", n, name, v)
		}
		n++
		if n%2 == 0 {
			return s.DeleteMeta(ctx, name)
		}
		return nil
	})
	if err != nil || n != 2500 {
		t.Fatalf("MetaPrefix: %d entries, %v", n, err)
	}
	n = 0
	if err := s.MetaPrefix(ctx, "audit/p/", func(string, []byte) error { n++; return nil }); err != nil || n != 1250 {
		t.Fatalf("after deleting half: %d entries, %v", n, err)
	}
	n = 0
	if err := s.MetaPrefix(ctx, "audit/", func(string, []byte) error {
		if n++; n == 3 {
			return ErrStop
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("ErrStop after 3: %d, %v", n, err)
	}
}

// Check reports a verified index that lost an entry or holds one too many.
func TestCheckVerifiedIndex(t *testing.T) {
	s, err := Open(t.TempDir()+"/index.db", Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stop := runWriter(t, s)
	mustPut(t, s, "/v/a", rec("a", 1, 7, 1))
	mustPut(t, s, "/v/b", rec("b", 2, 7, 2))
	stop()
	damage := func(fn func(b *bolt.Bucket) error) Report {
		t.Helper()
		if err := s.db.Update(func(tx *bolt.Tx) error { return fn(tx.Bucket(codec.BucketVerified)) }); err != nil {
			t.Fatal(err)
		}
		rep, err := s.Check()
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	var first []byte
	rep := damage(func(b *bolt.Bucket) error {
		k, _ := b.Cursor().First()
		first = append([]byte{}, k...)
		return b.Delete(k)
	})
	if rep.OK() {
		t.Fatal("Check missed a lost verified entry")
	}
	t.Log(rep.Problems)
	rep = damage(func(b *bolt.Bucket) error {
		if err := b.Put(first, []byte{9}); err != nil {
			return err
		}
		return b.Put(append(first, 'x'), []byte{1})
	})
	if rep.OK() {
		t.Fatal("Check missed a wrong size and a stray verified entry")
	}
	t.Log(rep.Problems)
}
