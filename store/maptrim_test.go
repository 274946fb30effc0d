package store

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// mappedKiB is how much of file is resident in this process's maps.
func mappedKiB(t *testing.T, file string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	var kib int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if fs := strings.Fields(l); len(fs) >= 5 && strings.Contains(fs[0], "-") && !strings.HasSuffix(fs[0], ":") {
			in = len(fs) >= 6 && fs[5] == file
			continue
		}
		if in && strings.HasPrefix(l, "Rss:") {
			n, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			kib += n
		}
	}
	return kib
}

// A first scan reads most of the index through bbolt's map; above the
// budget the next write unmaps it from the process, and every record
// still reads back as written.
func TestMapTrimmedAboveBudget(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s := openTestAt(t, path, Options{MaxDelay: 2e6, NoSync: true})
	const n = 3000
	ctx := context.Background()
	cs := make([]Change, n)
	for i := range cs {
		cs[i] = Change{Op: OpPut, Path: p("/r/d%02d/file-%05d", i%50, i), Record: rec(strconv.Itoa(i), int64(i+1), 1, uint64(i+10))}
	}
	if err := s.SubmitAll(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx); err != nil { // no merge of digest entries later
		t.Fatal(err)
	}
	readAll := func() {
		t.Helper()
		for i, c := range cs {
			r, ok, err := s.Get(c.Path)
			if err != nil || !ok || r.Size != int64(i+1) || !bytes.Equal(r.Digest, c.Record.Digest) {
				t.Fatalf("%s: %+v, %v; want size %d digest %x", c.Path, r, err, i+1, c.Record.Digest)
			}
		}
	}
	readAll() // maps every page of the records in
	before := mappedKiB(t, path)
	if before < 256 {
		t.Fatalf("%d KiB of the index mapped after reading %d records; want more for the test to mean something", before, n)
	}
	s.mapTrim.budget.Store(1 << 50) // never
	var under int64
	if err := s.db.Update(func(tx *bolt.Tx) error {
		s.mapTrim.trim(tx)
		under = mappedKiB(t, path)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if under < before/2 {
		t.Errorf("the map was trimmed under budget: %d KiB mapped, %d before", under, before)
	}
	s.mapTrim.budget.Store(1) // over it at once
	var after int64
	// A fault elsewhere in the process (seen beside busy loops) can map a
	// few pages back between the trim and the count: the trim must
	// bring the count down in one of three tries.
	for range 3 {
		if err := s.db.Update(func(tx *bolt.Tx) error {
			s.mapTrim.trim(tx)
			after = mappedKiB(t, path)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if after <= before/8 {
			break
		}
	}
	if after > before/8 {
		t.Errorf("%d KiB of the index still mapped after a trim over budget (%d before); want it unmapped", after, before)
	}
	readAll()
	mustPut(t, s, "/r/new", rec("new", 3, 1, 1)) // the writer's trim, and a commit after it
	readAll()
}

// oneGroupOneMerge makes a store commit what SubmitAll gives it as one
// group, and merge the digest entries in one transaction at Settle.
var oneGroupOneMerge = Options{MaxBatch: 8192, MaxGroupNodes: 1 << 30, MaxDelay: 2e9, MaxIdle: 50e6, NoSync: true,
	deferAt: 1, mergeIdle: time.Hour, mergeAt: 1 << 30, mergeTx: 1 << 20}

// A single transaction of random inserts maps a page for almost each
// change: the writer trims within it, every few changes, not only when
// the next one begins. Both the group commit and the digest merge.
func TestMapTrimmedWithinATransaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s := openTestAt(t, path, oneGroupOneMerge)
	const n = 6000
	ctx := context.Background()
	put := func(salt string) {
		t.Helper()
		cs := make([]Change, n)
		for i := range cs {
			cs[i] = Change{Op: OpPut, Path: p("/r/d%02d/file-%05d", i%50, i), Record: rec(salt+strconv.Itoa(i), int64(i+1), 1, uint64(i+10))}
		}
		if err := s.SubmitAll(ctx, cs); err != nil {
			t.Fatal(err)
		}
	}
	put("a")
	if err := s.Settle(ctx); err != nil { // the digest index holds every record
		t.Fatal(err)
	}
	s.mapTrim.budget.Store(1) // always over it
	s.mapTrim.slack.Store(0)
	var mapped int64
	testHookApplied = func() { mapped = mappedKiB(t, path) }
	defer func() { testHookApplied = nil }()
	// One group rewrites every record and removes its old digest entry.
	// The kernel maps up to 16 pages around each fault, so the control
	// is the same group trimmed only when its transaction begins.
	s.mapTrim.every.Store(1 << 40)
	put("b")
	control := mapped
	s.mapTrim.every.Store(4)
	put("c")
	if mapped > control/2 {
		t.Errorf("%d KiB of the index mapped at the end of a group of %d changes over budget, %d KiB when trimmed only as it began; want it trimmed within the transaction", mapped, n, control)
	}
	s.mapTrim.every.Store(16)
	before := s.mapTrim.trims.Load()
	if err := s.Settle(ctx); err != nil { // one merge transaction of n entries
		t.Fatal(err)
	}
	if got := s.mapTrim.trims.Load() - before; got < n/16/2 {
		t.Errorf("a merge of %d entries in one transaction trimmed the map %d times; want one every 16 entries", n, got)
	}
	for i := range n {
		r, ok, err := s.Get(p("/r/d%02d/file-%05d", i%50, i))
		if err != nil || !ok || r.Size != int64(i+1) {
			t.Fatalf("record %d: %+v %v %v", i, r, ok, err)
		}
	}
	if rep, err := s.Check(); err != nil || !rep.OK() {
		t.Fatalf("check: %+v, %v", rep, err)
	}
}

// The budget grows with the index: a merge into a large index reads its
// branch pages again and again, and a budget it outgrows at once makes
// every trim fault them back in. With the index's whole size added to
// the budget, a group and its merge never trim; with nothing added, the
// same work does.
func TestMapBudgetGrowsWithTheIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s := openTestAt(t, path, oneGroupOneMerge)
	const n = 3000
	ctx := context.Background()
	round := func(salt string) int64 {
		t.Helper()
		cs := make([]Change, n)
		for i := range cs {
			cs[i] = Change{Op: OpPut, Path: p("/r/d%02d/file-%05d", i%50, i), Record: rec(salt+strconv.Itoa(i), int64(i+1), 1, uint64(i+10))}
		}
		s.mapTrim.budget.Store(1)
		if err := s.db.Update(func(tx *bolt.Tx) error { s.mapTrim.trim(tx); return nil }); err != nil {
			t.Fatal(err)
		}
		s.mapTrim.budget.Store(s.mapTrim.fileResident()) // what is mapped now, the index out of it
		before := s.mapTrim.trims.Load()
		if err := s.SubmitAll(ctx, cs); err != nil {
			t.Fatal(err)
		}
		if err := s.Settle(ctx); err != nil {
			t.Fatal(err)
		}
		return s.mapTrim.trims.Load() - before
	}
	round("a")
	s.mapTrim.slack.Store(256 << 10) // the code's own pages faulted in meanwhile
	s.mapTrim.every.Store(16)
	s.mapTrim.share.Store(1 << 62) // nothing added
	if got := round("b"); got == 0 {
		t.Fatalf("a group of %d changes and its merge over a budget of what was mapped before them never trimmed the map; the test means nothing", n)
	}
	s.mapTrim.share.Store(1) // the whole index added
	if got := round("c"); got != 0 {
		t.Errorf("a group of %d changes and its merge trimmed the map %d times with the index's size added to the budget; want none", n, got)
	}
	for i := range n {
		r, ok, err := s.Get(p("/r/d%02d/file-%05d", i%50, i))
		if err != nil || !ok || r.Size != int64(i+1) || !bytes.Equal(r.Digest, rec("c"+strconv.Itoa(i), 1, 1, 1).Digest) {
			t.Fatalf("record %d: %+v %v %v", i, r, ok, err)
		}
	}
}
