package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/annexd/annexd/store/codec"
)

// bucketKeys returns the keys of bucket name, in order.
func bucketKeys(t *testing.T, s *Store, name []byte) [][]byte {
	t.Helper()
	var ks [][]byte
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(name).ForEach(func(k, _ []byte) error { ks = append(ks, bytes.Clone(k)); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// runsOf splits run-bucket keys into their runs' entries.
func runsOf(t *testing.T, ks [][]byte) map[uint64][][]byte {
	t.Helper()
	runs := map[uint64][][]byte{}
	for _, k := range ks {
		if len(k) <= codec.RunHeader {
			t.Fatalf("run key %x too short", k)
		}
		run := binary.BigEndian.Uint64(k)
		runs[run] = append(runs[run], k[codec.RunHeader:])
	}
	return runs
}

// sameInodePaths checks ByInodeAll against the model for every inode.
func sameInodePaths(t *testing.T, s *Store, m model) {
	t.Helper()
	seen := map[[2]uint64]bool{}
	for _, r := range m {
		id := [2]uint64{r.Dev, r.Ino}
		if seen[id] {
			continue
		}
		seen[id] = true
		got, err := s.ByInodeAll(r.Dev, r.Ino)
		want := m.paths(func(o Record) bool { return o.Dev == r.Dev && o.Ino == r.Ino })
		if err != nil || !slices.Equal(sorted(paths(got)), want) {
			t.Errorf("ByInodeAll(%d, %d) = %q, %v; want %q", r.Dev, r.Ino, paths(got), err, want)
		}
	}
}

// A deferring group writes its digest and inode entries as one run each
// and leaves them out of the indexes; lookups by digest and inode
// find them there; the merge moves them and empties both buckets.
func TestDeferredEntriesAreSortedRuns(t *testing.T) {
	s := openTestAt(t, filepath.Join(t.TempDir(), "index.db"),
		Options{NoSync: true, deferAt: 1, mergeIdle: time.Hour, mergeTx: 64})
	cs, m := pendingLoad()
	half := len(cs) / 2
	for _, group := range [][]Change{cs[:half], cs[half:]} {
		if err := s.SubmitAll(context.Background(), group); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := s.Stats()
	pend, pendIno := bucketKeys(t, s, codec.BucketPending), bucketKeys(t, s, codec.BucketPendInodes)
	if int64(len(pend)) != st.Ungrouped || len(pendIno) != len(pend) {
		t.Fatalf("%d pending digest entries, %d inode entries, %d ungrouped; want one inode entry each",
			len(pend), len(pendIno), st.Ungrouped)
	}
	if n := len(bucketKeys(t, s, codec.BucketInodes)); int64(n+len(pendIno)) != st.Files {
		t.Errorf("inode index %d + deferred %d entries, want %d records", n, len(pendIno), st.Files)
	}
	for name, ks := range map[string][][]byte{"pending": pend, "pendinodes": pendIno} {
		// (bbolt keeps keys in order whatever the order of the puts, so
		// the sorting in flushDigests shows only in what a commit costs.)
		if runs := runsOf(t, ks); len(runs) < 2 || int64(len(runs)) > s.deferred.runs.Load() {
			t.Errorf("%s: %d runs, the writer counts %d; want one for each of at least 2 groups", name, len(runs), s.deferred.runs.Load())
		}
	}
	mustCheck(t, s)
	sameInodePaths(t, s, m)

	if err := s.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, m := len(bucketKeys(t, s, codec.BucketPending)), len(bucketKeys(t, s, codec.BucketPendInodes)); n+m != 0 || s.deferred.runs.Load() != 0 {
		t.Errorf("after the merge: %d pending, %d deferred inode entries, %d runs counted", n, m, s.deferred.runs.Load())
	}
	if n := len(bucketKeys(t, s, codec.BucketInodes)); int64(n) != st.Files {
		t.Errorf("inode index has %d entries after the merge, want %d", n, st.Files)
	}
	sameInodePaths(t, s, m)
	sameDups(t, s, m)
}

// loadInOneDeferredGroup submits pendingLoad to a new index that defers
// groups of 600 changes or more, until the writer took all of it as one
// group: on a busy machine it may start a group before the rest is
// queued, and a first group of fewer than 600 indexes its records at once.
func loadInOneDeferredGroup(t *testing.T) (*Store, model) {
	t.Helper()
	for try := 1; ; try++ {
		s := openTestAt(t, filepath.Join(t.TempDir(), "index.db"),
			Options{NoSync: true, deferAt: 600, mergeIdle: time.Hour})
		cs, m := pendingLoad()
		if err := s.SubmitAll(context.Background(), cs); err != nil {
			t.Fatal(err)
		}
		n := len(bucketKeys(t, s, codec.BucketPendInodes))
		if n == len(m) {
			return s, m
		}
		if try == 10 {
			t.Fatalf("in 10 tries: %d deferred inode entries for %d records (each load split into groups, or entries left behind)", n, len(m))
		}
	}
}

// Records deferred in one group and removed or replaced by a later,
// non-deferring one leave no pending entry of either kind behind.
func TestLaterChangesDropDeferredEntries(t *testing.T) {
	s, m := loadInOneDeferredGroup(t)
	before := len(bucketKeys(t, s, codec.BucketPendInodes))
	var later []Change
	for i := 1; i < 700; i += 7 {
		path := fmt.Sprintf("/t/d%d/f%03d", i%7, i)
		if _, ok := m[path]; !ok {
			continue
		}
		if i%2 == 0 {
			later = append(later, Change{Op: OpDelete, Path: []byte(path)})
			delete(m, path)
			continue
		}
		r := rec("replaced", 7, 3, uint64(5000+i))
		later = append(later, Change{Op: OpPut, Path: []byte(path), Record: r})
		m[path] = r
	}
	for _, c := range later { // one change a group: none defers
		if err := s.SubmitAll(context.Background(), []Change{c}); err != nil {
			t.Fatal(err)
		}
	}
	after := len(bucketKeys(t, s, codec.BucketPendInodes))
	if after != before-len(later) {
		t.Errorf("deferred inode entries: %d before, %d after %d changes to their records", before, after, len(later))
	}
	mustCheck(t, s)
	sameInodePaths(t, s, m)

	// A tree removed in one change drops more entries than runDrops
	// seeks for: the rest come from its index of the bucket.
	var gone int
	for path := range m {
		if strings.HasPrefix(path, "/t/d3/") {
			delete(m, path)
			gone++
		}
	}
	if gone <= seekDrops {
		t.Fatalf("the test removes %d records, want more than %d", gone, seekDrops)
	}
	if err := s.SubmitAll(context.Background(), []Change{{Op: OpDeleteSubtree, Path: []byte("/t/d3")}}); err != nil {
		t.Fatal(err)
	}
	if n := len(bucketKeys(t, s, codec.BucketPendInodes)); n != after-gone {
		t.Errorf("deferred inode entries: %d after removing a tree of %d, want %d", n, gone, after-gone)
	}
	st, _ := s.Stats()
	if st.Ungrouped != int64(len(bucketKeys(t, s, codec.BucketPending))) || st.Files != int64(len(m)) {
		t.Errorf("after removing a tree: %+v, want %d files", st, len(m))
	}
	mustCheck(t, s)
	sameInodePaths(t, s, m)
	sameDups(t, s, m)
	sameInodePaths(t, s, m)
}

// The merge reads runs side by side: every entry once, in order, however
// the runs overlap and whatever the step size, and an entry in two runs
// once.
func TestRunMergeOrder(t *testing.T) {
	s := openTest(t)
	var want []string
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("runs-test"))
		if err != nil {
			return err
		}
		for run := uint64(1); run <= 5; run++ {
			for i := uint64(0); i < 20+run; i++ {
				e := fmt.Sprintf("e%04d", i*run*7%97+run)
				k := append(binary.BigEndian.AppendUint64(nil, run), e...)
				if err := b.Put(k, []byte(e)); err != nil {
					return err
				}
				want = append(want, e)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	want = slices.Compact(want)
	for _, step := range []int{1, 3, 1000} {
		var got []string
		err := s.db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("runs-test"))
			m, err := newRunMerge(b)
			for done := false; err == nil && !done; {
				done, err = m.step(b, step, func(e, v []byte) error {
					if !bytes.Equal(e, v) {
						return errors.New("value is not its entry's")
					}
					got = append(got, string(e))
					return nil
				})
			}
			return err
		})
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("step %d: %v, %q; want %q", step, err, got, want)
		}
	}
}

func TestMergeDue(t *testing.T) {
	d := &deferred{opts: &Options{}}
	for _, c := range []struct {
		pending, digested, runs int64
		want                    bool
	}{
		{1000, 1000, 10, false},             // below mergeMin
		{mergeMin, mergeMin, 1, true},       // a first scan's first merge
		{mergeMin, 10 * mergeMin, 1, false}, // a tenth pending
		{500_000, 1_000_000, 100, true},     // as many pending as merged
		{400_000, 1_000_000, 100, false},
		{20_000, 10_000_000, maxRuns, true}, // the lookups' bound
	} {
		if got := d.mergeDue(c.pending, c.digested, c.runs); got != c.want {
			t.Errorf("mergeDue(%d, %d, %d) = %v, want %v", c.pending, c.digested, c.runs, got, c.want)
		}
	}
}

// A schema-5 index with entries pending (sequence-numbered, their inode
// entries already in the inode index, some also merged by a merge cut
// short) migrates to one run; it checks, lists and groups as before.
func TestMigrateSchema5(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true, deferAt: 1, mergeIdle: time.Hour, mergeTx: 64})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	cs, m := pendingLoad()
	if err := s.SubmitAll(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	mergeHook = func() error { return errors.New("cut short") } // Close's merge stops after a chunk
	defer func() { mergeHook = func() error { return nil } }()
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mergeHook = func() error { return nil }
	editRaw(t, path, func(tx *bolt.Tx) error { return toSchema5(tx, 3) })

	if _, err := Open(path, Options{ReadOnly: true}); !errors.Is(err, ErrNeedsMigration) {
		t.Fatalf("read-only open of schema 5 = %v", err)
	}
	s, err = Open(path, Options{NoSync: true}) // no writer yet: Run would merge at once
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st, _ := s.Stats(); st.SchemaVer != SchemaVersion || st.Ungrouped == 0 {
		t.Fatalf("after the migration: %+v, want schema %d with entries pending", st, SchemaVersion)
	}
	if runs := runsOf(t, bucketKeys(t, s, codec.BucketPending)); len(runs) != 1 {
		t.Errorf("migrated pending entries in %d runs, want 1", len(runs))
	}
	mustCheck(t, s)
	sameInodePaths(t, s, m)
	for _, path := range []string{"/t/d1/f001", "/t/d2/f002"} {
		r := m[path]
		got, err := s.ByDigest(r.Backend, r.Digest)
		want := m.paths(func(o Record) bool { return o.Indexed() && bytes.Equal(o.Digest, r.Digest) })
		if err != nil || !slices.Equal(sorted(paths(got)), want) {
			t.Errorf("ByDigest of %s = %q, %v; want %q", path, paths(got), err, want)
		}
	}
	stop = runWriter(t, s)
	defer stop()
	sameDups(t, s, m)
	mustCheck(t, s)
}

// toSchema5 takes a schema-6 index back to what schema 5 wrote: inode
// entries in the inode index, pending entries keyed by a sequence number,
// no pendinodes bucket. The first merged entries are also left in the
// digest index with their groups, as a schema-5 merge cut short would.
func toSchema5(tx *bolt.Tx, merged int) error {
	inodes := tx.Bucket(codec.BucketInodes)
	err := tx.Bucket(codec.BucketPendInodes).ForEach(func(k, _ []byte) error {
		return inodes.Put(bytes.Clone(k[codec.RunHeader:]), nil)
	})
	if err != nil {
		return err
	}
	if err := tx.DeleteBucket(codec.BucketPendInodes); err != nil {
		return err
	}
	var vals [][]byte
	if err := tx.Bucket(codec.BucketPending).ForEach(func(_, v []byte) error {
		vals = append(vals, bytes.Clone(v))
		return nil
	}); err != nil {
		return err
	}
	if err := tx.DeleteBucket(codec.BucketPending); err != nil {
		return err
	}
	b, err := tx.CreateBucket(codec.BucketPending)
	if err != nil {
		return err
	}
	w, err := newWtx(tx, &epoch{}, &[3]keyBuf{})
	if err != nil {
		return err
	}
	for i, v := range vals {
		if err := b.Put(binary.BigEndian.AppendUint64(nil, uint64(i+1)), v); err != nil {
			return err
		}
		if i < merged {
			e, err := decodePending(v)
			if err != nil {
				return err
			}
			r := e.record()
			if err := w.addDigest(e.dk, e.fk, &r); err != nil {
				return err
			}
		}
	}
	if err := w.meta.Put(codec.MetaCounters, w.c.encode()); err != nil {
		return err
	}
	return tx.Bucket(codec.BucketMeta).Put(codec.MetaSchema, binary.AppendUvarint(nil, 5))
}
