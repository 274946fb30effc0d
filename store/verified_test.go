package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/annexd/annexd/key"
)

// schema2Index copies the schema-2 fixture (written by TestWriteFixture at
// the last commit of schema 2) into a temp dir and returns its path and the
// listing of its content.
func schema2Index(t *testing.T) (string, listing) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "index.db")
	if err := os.WriteFile(path, gunzip(t, "testdata/schema2.db.gz"), 0o600); err != nil {
		t.Fatal(err)
	}
	var want listing
	if err := json.Unmarshal(fixtureListing(t, "testdata/schema2.json.gz"), &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Records) < 1000 {
		t.Fatalf("fixture listing has %d records", len(want.Records))
	}
	return path, want
}

// auditedOf lists the records of l an audit re-reads, least recently
// checked first (ties in path order: the fixture's are all in one
// directory per time, so file-key order is path order there).
func auditedOf(l listing) []listedRecord {
	var out []listedRecord
	for _, e := range l.Records {
		if e.Record.Audited() {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b listedRecord) int {
		switch {
		case a.Record.Checked() < b.Record.Checked():
			return -1
		case a.Record.Checked() > b.Record.Checked():
			return 1
		}
		return 0
	})
	return out
}

// byChecked lists what ByChecked hands out below before.
func byChecked(t *testing.T, s *Store, before int64) []Due {
	t.Helper()
	var out []Due
	if err := s.ByChecked(context.Background(), nil, before, func(d Due) error {
		out = append(out, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameDue compares ByChecked's answer with the records it should list, by
// checked time and as sets of paths within one time.
func sameDue(t *testing.T, got []Due, want []listedRecord) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("ByChecked listed %d records, want %d", len(got), len(want))
	}
	type tp struct {
		t    int64
		path string
	}
	g, w := make([]tp, len(got)), make([]tp, len(want))
	for i := range got {
		g[i] = tp{got[i].Record.Checked(), string(got[i].Path)}
		w[i] = tp{want[i].Record.Checked(), string(want[i].Path)}
		if i > 0 && g[i].t < g[i-1].t {
			t.Fatalf("ByChecked out of order at %q: %d after %d", g[i].path, g[i].t, g[i-1].t)
		}
	}
	less := func(a, b tp) int {
		if c := cmpInt(a.t, b.t); c != 0 {
			return c
		}
		return strings.Compare(a.path, b.path)
	}
	slices.SortFunc(g, less)
	slices.SortFunc(w, less)
	if !slices.Equal(g, w) {
		t.Fatal("ByChecked lists other records than the audited ones")
	}
}

// Opening the schema-2 fixture read-only refuses and leaves it alone; a
// writable open adds the verified index in place, keeping every path,
// record, index entry, group, counter and meta value; a second open does
// nothing more.
func TestMigrateSchema2(t *testing.T) {
	migrateTxSize = 4096 // many chunks
	t.Cleanup(func() { migrateTxSize = compactTxSize })
	path, want := schema2Index(t)
	sum := fileSum(t, path)
	if _, err := Open(path, Options{ReadOnly: true}); !errors.Is(err, ErrNeedsMigration) {
		t.Fatalf("read-only open of schema 2 = %v", err)
	}
	if fileSum(t, path) != sum {
		t.Fatal("read-only open changed the file")
	}
	var log bytes.Buffer
	s, err := Open(path, Options{NoSync: true, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	audited := auditedOf(want)
	t.Log(strings.TrimSpace(log.String()))
	if !strings.Contains(log.String(), "store: added the verification index") ||
		!strings.Contains(log.String(), fmt.Sprintf("entries=%d", len(audited))) {
		t.Errorf("migration log: %q", log.String())
	}
	if st, _ := s.Stats(); st.SchemaVer != SchemaVersion {
		t.Fatalf("schema after migration: %d", st.SchemaVer)
	}
	sameListing(t, listIndex(t, s), want)
	mustCheck(t, s)
	sameDue(t, byChecked(t, s, 1<<62), audited)
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("left next to the index: %v", entries)
	}

	s.Close()
	log.Reset()
	s2 := openTestAt(t, path, Options{NoSync: true, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if log.Len() != 0 {
		t.Errorf("second open logged %q", log.String())
	}
	sameListing(t, listIndex(t, s2), want)
}

// A schema-2 migration stopped after any chunk leaves schema 2 and the
// records as they were; the next open drops the partial index and builds
// it again.
func TestMigrateSchema2Interrupted(t *testing.T) {
	migrateTxSize = 4096
	t.Cleanup(func() { migrateTxSize = compactTxSize; migrateHook = func(string) error { return nil } })
	path, want := schema2Index(t)
	boom := errors.New("injected failure")
	for _, nth := range []int{1, 3, 7} {
		n := 0
		migrateHook = func(step string) error {
			if step == "verified" {
				if n++; n == nth {
					return boom
				}
			}
			return nil
		}
		if _, err := Open(path, Options{NoSync: true}); !errors.Is(err, boom) {
			t.Fatalf("open failing at chunk %d = %v", nth, err)
		}
		if _, err := Open(path, Options{ReadOnly: true}); !errors.Is(err, ErrNeedsMigration) {
			t.Fatalf("after failure at chunk %d: read-only open = %v", nth, err)
		}
		if v := schemaOf(t, path); v != 2 {
			t.Fatalf("after failure at chunk %d: schema %d", nth, v)
		}
	}
	migrateHook = func(string) error { return nil }
	s := openTestAt(t, path, Options{NoSync: true})
	sameListing(t, listIndex(t, s), want)
	sameDue(t, byChecked(t, s, 1<<62), auditedOf(want))
}

// A schema-2 migration killed at any step (SIGKILL, fsync on) leaves the
// records as they were, in schema 2 or a later one; the next open finishes it.
func TestMigrateSchema2Killed(t *testing.T) {
	path, want := schema2Index(t)
	v2 := gunzip(t, "testdata/schema2.db.gz")
	var kept, done int
	for _, at := range []int{1, 2, 5, 1 << 20} {
		killAtStep(t, path, at)
		switch v := schemaOf(t, path); v {
		case 2:
			kept++
		case 3, 4, SchemaVersion:
			done++
		default:
			t.Fatalf("killed at step %d: schema %d", at, v)
		}
		s, err := Open(path, Options{NoSync: true})
		if err != nil {
			t.Fatalf("killed at step %d: reopen: %v", at, err)
		}
		sameListing(t, listIndex(t, s), want)
		mustCheck(t, s)
		sameDue(t, byChecked(t, s, 1<<62), auditedOf(want))
		s.Close()
		if err := os.WriteFile(path, v2, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d kills left schema 2, %d found a later one", kept, done)
	if kept == 0 || done == 0 {
		t.Errorf("kills should land both during and after the migration: %d, %d", kept, done)
	}
}

// ByChecked hands out the audited records least recently checked first,
// below the time asked for and from a position; records written while it
// runs move past that time and are not met again; CountChecked agrees.
func TestByChecked(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	const t0 = 1_700_000_000_000_000_000
	var cs []Change
	for i := range 3000 {
		r := rec(fmt.Sprintf("c%d", i), int64(i), 7, uint64(i)+1)
		r.HashedAt = t0 + int64(i%100)*1e9
		r.VerifiedAt = 0
		if i%3 == 0 {
			r.VerifiedAt = t0 + int64(i%50)*1e9 + 1 // an audit confirmed it later
		}
		switch i % 17 {
		case 1:
			r.State = StateCorrupt // still re-read
		case 2:
			r.State = StateChanging // the indexer's: left out
		case 3:
			r.State, r.Backend, r.Digest = StateUnreadable, key.Unknown, nil // nothing to compare: left out
		}
		cs = append(cs, Change{Op: OpPut, Path: p("/d%d/f%04d", i%7, i), Record: r})
	}
	submit(t, s, cs)
	var want []listedRecord
	var wantBytes int64
	for _, c := range cs {
		if c.Record.Audited() {
			want = append(want, listedRecord{c.Path, c.Record})
			wantBytes += c.Record.Size
		}
	}
	slices.SortStableFunc(want, func(a, b listedRecord) int { return cmpInt(a.Record.Checked(), b.Record.Checked()) })
	sameDue(t, byChecked(t, s, 1<<62), want)
	n, err := s.CountChecked(ctx, 1<<62)
	if err != nil || n.Files != int64(len(want)) || n.Bytes != wantBytes || n.Oldest != t0 {
		t.Fatalf("CountChecked = %+v, %v; want %d files, %d bytes, oldest %d", n, err, len(want), wantBytes, int64(t0))
	}

	// Below a time: only what was checked before it.
	cut := int64(t0 + 40e9)
	var below []listedRecord
	for _, e := range want {
		if e.Record.Checked() < cut {
			below = append(below, e)
		}
	}
	sameDue(t, byChecked(t, s, cut), below)
	if n, _ := s.CountChecked(ctx, cut); n.Files != int64(len(below)) {
		t.Fatalf("CountChecked below the cut = %d, want %d", n.Files, len(below))
	}

	// From a position: the rest.
	all := byChecked(t, s, cut)
	var rest []Due
	if err := s.ByChecked(ctx, all[999].Next, cut, func(d Due) error { rest = append(rest, d); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(rest) != len(all)-1000 {
		t.Fatalf("from a position: %d records, want %d", len(rest), len(all)-1000)
	}
	for i, d := range rest {
		if !bytes.Equal(d.Path, all[1000+i].Path) {
			t.Fatalf("from a position, record %d is %s, want %s", i, d.Path, all[1000+i].Path)
		}
	}

	// A pass that verifies what it meets, writing as it goes: every record
	// below the cut once, then none.
	const now = t0 + 500e9
	met := map[string]int{}
	err = s.ByChecked(ctx, nil, cut, func(d Due) error {
		met[string(d.Path)]++
		r := d.Record
		r.VerifiedAt = now
		return s.Put(ctx, d.Path, r)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(met) != len(below) {
		t.Fatalf("verifying pass met %d records, want %d", len(met), len(below))
	}
	for p, n := range met {
		if n != 1 {
			t.Fatalf("%s met %d times", p, n)
		}
	}
	if left := byChecked(t, s, cut); len(left) != 0 {
		t.Fatalf("%d records still below the cut after the pass", len(left))
	}
	if n, _ := s.CountChecked(ctx, now+1); n.Files != int64(len(want)) {
		t.Fatalf("after the pass CountChecked = %d, want %d", n.Files, len(want))
	}

	// Moves keep a record's place; deletions and the indexer's states
	// take it out; a size change moves the size.
	if _, err := s.Move(ctx, []byte("/d0"), []byte("/e0")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSubtree(ctx, []byte("/d1")); err != nil {
		t.Fatal(err)
	}
	r0 := want[0].Record
	r0.State = StateChanging
	mustPut(t, s, string(want[0].Path), r0)
	mustCheck(t, s)
	for _, d := range byChecked(t, s, 1<<62) {
		if bytes.HasPrefix(d.Path, []byte("/d0/")) || bytes.HasPrefix(d.Path, []byte("/d1/")) || bytes.Equal(d.Path, want[0].Path) {
			t.Fatalf("ByChecked lists %s", d.Path)
		}
	}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// submit applies cs and fails the test on the first error.
func submit(t *testing.T, s *Store, cs []Change) {
	t.Helper()
	errs := make(chan error, len(cs))
	for _, c := range cs {
		s.Submit(c, func(err error) { errs <- err })
	}
	for range cs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// CountCheckedUnder counts the records at or below the directories given
// and no others: not those of a sibling whose name starts the same.
func TestCountCheckedUnder(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	var cs []Change
	want := map[string]int64{}
	for i, dir := range []string{"/home/a", "/home/a/sub/deep", "/home/ab", "/srv", "/home/a"} {
		for j := range 10 + i {
			r := rec(fmt.Sprintf("%s%d", dir, j), int64(j+1), 7, uint64(100*i+j)+1)
			cs = append(cs, Change{Op: OpPut, Path: p("%s/f%d-%d", dir, i, j), Record: r})
			want[dir] += 1
		}
	}
	submit(t, s, cs)
	for _, c := range []struct {
		dirs []string
		n    int64
	}{
		{[]string{"/home/a"}, want["/home/a"] + want["/home/a/sub/deep"]},
		{[]string{"/home/ab"}, want["/home/ab"]},
		{[]string{"/home/a", "/srv"}, want["/home/a"] + want["/home/a/sub/deep"] + want["/srv"]},
		{[]string{"/"}, int64(len(cs))},
		{[]string{"/nowhere"}, 0},
		{nil, 0},
	} {
		var dirs [][]byte
		for _, d := range c.dirs {
			dirs = append(dirs, []byte(d))
		}
		n, err := s.CountCheckedUnder(ctx, 1<<62, dirs)
		if err != nil || n.Files != c.n {
			t.Errorf("CountCheckedUnder(%v) = %+v, %v; want %d files", c.dirs, n, err, c.n)
		}
	}
}
