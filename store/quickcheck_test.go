package store

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/store/codec"
	"github.com/annexd/annexd/store/internal/pagecheck"
)

// withQuickLeaves sets how many leaves per bucket the check at open reads.
func withQuickLeaves(t *testing.T, n int) {
	old := quickLeaves
	quickLeaves = n
	t.Cleanup(func() { quickLeaves = old })
}

// churnIndex is makeIndex followed by deletions of single records and of
// a whole directory, so the index has free pages and merged leaves.
func churnIndex(t *testing.T, n int) string {
	t.Helper()
	path := makeIndex(t, n)
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	ctx := context.Background()
	for i := 0; i < n; i += 3 {
		s.Submit(Change{Op: OpDelete, Path: p("/data/d%d/file-%d.txt", i%17, i)}, nil)
	}
	if err := s.DeleteSubtree(ctx, []byte("/data/d5")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMeta(ctx, "calibration", bytes.Repeat([]byte("x"), 6000)); err != nil {
		t.Fatal(err) // a value larger than a page: an overflow page
	}
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// Sound indexes pass the check at open, whether it reads every leaf or
// only two of each bucket.
func TestQuickCheckPassesSoundIndexes(t *testing.T) {
	for _, leaves := range []int{128, 2} {
		withQuickLeaves(t, leaves)
		for _, path := range []string{makeIndex(t, 0), makeIndex(t, 5000), churnIndex(t, 5000)} {
			s, err := Open(path, Options{})
			if err != nil {
				t.Fatalf("%d leaves: Open of a sound index: %v", leaves, err)
			}
			s.Close()
		}
	}
}

// treePages lists the pages of path's trees and its freelist page: the
// pages with a header of their own. The continuation pages of a value
// larger than a page hold only its bytes, which no structural check can
// judge (bbolt keeps no checksums), so they are left out.
func treePages(t *testing.T, path string) ([]int, int) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ids []int
	_ = db.View(func(tx *bolt.Tx) error {
		for id := 2; id < int(tx.Size())/db.Info().PageSize; id++ {
			if pi, err := tx.Page(id); err == nil && pi != nil && pi.Type != "free" {
				ids = append(ids, id)
				id += pi.OverflowCount
			}
		}
		return nil
	})
	return ids, db.Info().PageSize
}

func overwritePage(t *testing.T, path string, id, ps int, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b[:ps], int64(id*ps)); err != nil {
		t.Fatal(err)
	}
}

// Every page in use with a header of its own (treePages), overwritten
// alone with junk or zeros, is found at open when the index is small
// enough for the check to read every leaf; the file is left as it was.
func TestQuickCheckFindsEachDamagedPage(t *testing.T) {
	src := churnIndex(t, 3000)
	orig, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	ids, ps := treePages(t, src)
	rng := rand.New(rand.NewPCG(1, 2))
	junk := make([]byte, ps)
	path := filepath.Join(t.TempDir(), "index.db")
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	// want is what the file must hold: orig with the page damaged. Each
	// round undoes its page in both, so that the file is orig again
	// without writing all of it.
	want := bytes.Clone(orig)
	for i, id := range ids {
		fill := junk
		if i%2 == 0 {
			for j := range junk {
				junk[j] = byte(rng.Uint32())
			}
		} else {
			fill = make([]byte, ps)
		}
		page := want[id*ps : (id+1)*ps]
		copy(page, fill)
		overwritePage(t, path, id, ps, fill)
		s, err := Open(path, Options{})
		switch {
		case err == nil:
			s.Close()
			t.Errorf("page %d of %v overwritten: Open found nothing", id, ids)
		case !errors.Is(err, ErrCorrupt):
			t.Errorf("page %d overwritten: Open = %v, want ErrCorrupt", id, err)
		}
		held := fileHolds(t, path, want)
		if !held {
			t.Errorf("page %d overwritten: Open changed the file", id)
		}
		copy(page, orig[id*ps:])
		if !held {
			if err := os.WriteFile(path, orig, 0o600); err != nil {
				t.Fatal(err)
			}
			continue
		}
		overwritePage(t, path, id, ps, page)
	}
	t.Logf("%d pages damaged one at a time", len(ids))
}

// fileHolds reports whether the file at path holds exactly want. It
// compares bytes rather than sums: hashing the whole file twice for each
// page cost most of TestQuickCheckFindsEachDamagedPage's time under the
// race detector.
func fileHolds(t *testing.T, path string, want []byte) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() != int64(len(want)) {
		return false
	}
	sumBuf.Lock()
	defer sumBuf.Unlock()
	for off := 0; off < len(want); {
		n, err := f.ReadAt(sumBuf.b[:min(len(sumBuf.b), len(want)-off)], int64(off))
		if n == 0 {
			t.Fatalf("read %s at %d: %v", path, off, err)
		}
		if !bytes.Equal(sumBuf.b[:n], want[off:off+n]) {
			return false
		}
		off += n
	}
	return true
}

// filesLeaves lists the leaf pages of the files index in id order.
func filesLeaves(t *testing.T, path string) []uint64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var root uint64
	_ = db.View(func(tx *bolt.Tx) error { root = uint64(tx.Bucket(codec.BucketFiles).Root()); return nil })
	ps := db.Info().PageSize
	db.Close()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	r := pagecheck.Reader{F: f, PS: ps, HWM: uint64(fi.Size()) / uint64(ps)}
	level := []uint64{root}
	for {
		pg, err := r.Page(level[0])
		if err != nil {
			t.Fatal(err)
		}
		if pg.IsLeaf() {
			slices.SortFunc(level, cmp.Compare)
			return level
		}
		var next []uint64
		for _, id := range level {
			pg, _ := r.Page(id)
			es, _ := pg.Elems()
			for _, e := range es {
				next = append(next, e.Child)
			}
		}
		level = next
	}
}

// A damaged leaf the sample at open does not read is met by the first
// read through it: that read fails with ErrCorrupt, Damaged is closed,
// and from then on the store refuses writes, so the file stays as found.
func TestDamageMetByReadStopsWrites(t *testing.T) {
	withQuickLeaves(t, 2)
	path := makeIndex(t, 3000)
	leaves := filesLeaves(t, path)
	if len(leaves) <= 2 {
		t.Fatalf("%d files leaves; the test needs more than the sample", len(leaves))
	}
	_, ps := treePages(t, path)
	overwritePage(t, path, int(leaves[len(leaves)/2]), ps, make([]byte, ps))
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatalf("Open with a sample that misses the damaged leaf: %v", err)
	}
	stop := runWriter(t, s)
	select {
	case <-s.Damaged():
		t.Fatal("Damaged closed before any read met the damage")
	default:
	}
	err = s.Subtree(context.Background(), []byte("/"), func([]byte, Record) error { return nil })
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Scan through the damaged leaf = %v, want ErrCorrupt", err)
	}
	select {
	case <-s.Damaged():
	default:
		t.Fatal("Damaged not closed after a read met the damage")
	}
	if !errors.Is(s.Damage(), ErrCorrupt) {
		t.Errorf("Damage() = %v", s.Damage())
	}
	before, _ := os.ReadFile(path)
	if err := s.Put(context.Background(), []byte("/data/new"), rec("new", 3, 1, 99999)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Put after the damage was met = %v, want ErrCorrupt", err)
	}
	stop()
	s.Close()
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Errorf("the damaged index was written after the damage was met")
	}
}

// BenchmarkOpenCheck1M: the check at open on an index of 10^6 records
// loaded in walk order, with the file in the page cache (warm) and after
// dropping its pages (cold, posix_fadvise DONTNEED), against a plain bbolt
// open and the full Check.
func BenchmarkOpenCheck1M(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("ANNEXD_BENCH_OPEN_N")); err == nil {
		n = v
	}
	path := filepath.Join(b.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	stop := runWriter(b, s)
	load(b, s, walkOrder(syntheticFiles(n, n/25, 0.1)))
	stop()
	s.Close()
	fi, _ := os.Stat(path)
	b.Logf("%d records, index %d MB", n, fi.Size()>>20)
	drop := func() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		_ = f.Sync()
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
	}
	for _, cold := range []bool{false, true} {
		name := map[bool]string{false: "warm", true: "cold"}[cold]
		b.Run(name+"/bolt-open", func(b *testing.B) {
			for b.Loop() {
				if cold {
					b.StopTimer()
					drop()
					b.StartTimer()
				}
				db, err := bolt.Open(path, 0o600, &bolt.Options{FreelistType: bolt.FreelistMapType, NoStatistics: true})
				if err != nil {
					b.Fatal(err)
				}
				db.Close()
			}
		})
		b.Run(name+"/quick-check", func(b *testing.B) {
			db, err := bolt.Open(path, 0o600, &bolt.Options{FreelistType: bolt.FreelistMapType, NoStatistics: true})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			var q *pagecheck.Result
			for b.Loop() {
				if cold {
					b.StopTimer()
					drop()
					b.StartTimer()
				}
				if q, err = runQuick(db, path); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(q.PagesRead()), "pages-read")
			b.ReportMetric(float64(q.Pages()), "pages-in-file")
		})
		b.Run(name+"/store-open", func(b *testing.B) {
			for b.Loop() {
				if cold {
					b.StopTimer()
					drop()
					b.StartTimer()
				}
				s, err := Open(path, Options{})
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
			}
		})
	}
	b.Run("warm/full-check", func(b *testing.B) {
		s, err := Open(path, Options{ReadOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for b.Loop() {
			if rep, err := s.Check(); err != nil || !rep.OK() {
				b.Fatal(err, rep.Problems)
			}
		}
	})
}
