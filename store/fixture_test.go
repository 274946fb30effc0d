package store

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/annexd/annexd/key"
)

// The schema-1 fixture (testdata/schema1.db.gz) was written by
// TestWriteFixture at the last commit whose SchemaVersion was 1, and its
// content listed in testdata/schema1.json by the same run. Running it
// again writes an index of the current schema: only do so to make a
// fixture of a new schema, under a new name.
//
//	ANNEXD_WRITE_FIXTURE=/tmp/schemaN go test -run TestWriteFixture ./store/
func TestWriteFixture(t *testing.T) {
	out := os.Getenv("ANNEXD_WRITE_FIXTURE")
	if out == "" {
		t.Skip("writes a fixture only when ANNEXD_WRITE_FIXTURE names the output (without extension)")
	}
	s, err := Open(out+".db", Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	fillFixture(t, s)
	stop()
	mustCheck(t, s)
	l := listIndex(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Compact(out+".db", Options{}); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out+".json", b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fillFixture writes about 2,000 records exercising every part of the
// schema: directory ids of one, two and three varint bytes, inode numbers
// beyond 2^32, hardlinks, duplicates across extensions, every state,
// several backends, renames, deletions, generations and user meta.
func fillFixture(t *testing.T, s *Store) {
	ctx := context.Background()
	submitAll := func(cs []Change) {
		if err := s.SubmitAll(ctx, cs); err != nil {
			t.Fatal(err)
		}
	}
	gen1, _ := s.NextGeneration(ctx)
	// 16,500 directories of one file each: ids up to 16,500; most go away
	// again, ids are never reused.
	var cs []Change
	for i := range 16500 {
		r := rec(fmt.Sprintf("single %d", i%700), int64(i%700)+1, 2049, 1<<32+uint64(i))
		r.Generation = gen1
		cs = append(cs, Change{Op: OpPut, Path: p("/fx/d%05d/f%d.dat", i, i%3), Record: r})
	}
	submitAll(cs)
	cs = cs[:0]
	for i := range 16500 {
		if i%20 != 0 && i != 127 && i != 128 && i != 16383 && i != 16384 {
			cs = append(cs, Change{Op: OpDelete, Path: p("/fx/d%05d/f%d.dat", i, i%3)})
		}
	}
	submitAll(cs)
	gen2, _ := s.NextGeneration(ctx)
	cs = cs[:0]
	var many []string
	// One directory of many files, names in and out of UTF-8.
	for i := range 1200 {
		name := fmt.Sprintf("/fx/many/%04d.jpg", i)
		switch i % 6 {
		case 1:
			name = fmt.Sprintf("/fx/many/\xff\xfe%04d.JPG", i)
		case 2:
			name = fmt.Sprintf("/fx/many/caf\xe9 %04d", i)
		case 3:
			name = fmt.Sprintf("/fx/many/ünï cødé %04d.tar.gz", i)
		}
		r := rec(fmt.Sprintf("many %d", i%150), int64(i%150)*1000, 64768, uint64(1)<<40+uint64(i))
		r.Generation = gen2
		switch i % 50 {
		case 7:
			r.State = StateUnreadable
		case 8:
			r.State = StateChanging
		case 9:
			r.State = StateCorrupt
		case 10:
			r.State, r.Backend, r.Digest, r.HashedAt = StatePending, key.Unknown, nil, 0
		case 11:
			r.VerifiedAt = r.HashedAt + 5_000_000_000
		}
		cs = append(cs, Change{Op: OpPut, Path: []byte(name), Record: r})
		many = append(many, name)
	}
	// Hardlinks: one inode under two and three paths; the largest inode
	// numbers.
	for i := range 40 {
		r := rec(fmt.Sprintf("linked %d", i), 4096, 2049, ^uint64(0)-uint64(i))
		r.Generation = gen2
		for j := range 2 + i%2 {
			cs = append(cs, Change{Op: OpPut, Path: p("/fx/links/%d/l%d-%d", j, i, j), Record: r})
		}
	}
	// Other backends and devices.
	for i := range 60 {
		d := sha512.Sum512(fmt.Appendf(nil, "wide %d", i%20))
		r := Record{Backend: key.SHA512E, Digest: d[:], Size: int64(i%20) + 100, MtimeNs: 1_600_000_000_000_000_000 + int64(i),
			CtimeNs: 1_600_000_000_000_000_000, Dev: uint64(i%3) << 20, Ino: uint64(i) + 128, HashedAt: 1_650_000_000_000_000_000, Generation: gen2}
		if i%2 == 1 {
			r.Backend = key.SHA512
		}
		cs = append(cs, Change{Op: OpPut, Path: p("/fx/wide/w%02d.PNG", i), Record: r})
	}
	submitAll(cs)
	cs = cs[:0]
	// Renames of a file and of a directory; a removed subtree.
	if _, err := s.Move(ctx, []byte("/fx/many/0000.jpg"), []byte("/fx/renamed/first.jpg")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Move(ctx, []byte("/fx/links/1"), []byte("/fx/links/one")); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		r := rec(fmt.Sprintf("gone %d", i), 10, 2049, uint64(i)+1)
		cs = append(cs, Change{Op: OpPut, Path: p("/fx/gone/sub%d/g%d", i%7, i), Record: r})
	}
	submitAll(cs)
	if err := s.DeleteSubtree(ctx, []byte("/fx/gone")); err != nil {
		t.Fatal(err)
	}
	// A third generation marks part of /fx/many; a sweep drops the rest of
	// what generation 2 saw there.
	gen3, _ := s.NextGeneration(ctx)
	cs = cs[:0]
	for i, name := range many[1:] {
		if i%4 != 3 {
			cs = append(cs, Change{Op: OpMark, Path: []byte(name), Gen: gen3})
		}
	}
	submitAll(cs)
	if _, err := s.Sweep(ctx, []byte("/fx/many"), gen3, nil); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"scan/last": "2026-11-30", "bin": "\x00\xff\x80", "audit/cursor": "\x81\x01abc"} {
		if err := s.PutMeta(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.NextGeneration(ctx); err != nil {
		t.Fatal(err)
	}
}

// listing is everything an index answers, in an order that does not
// depend on its key encoding.
type listing struct {
	Stats   Stats
	Records []listedRecord
	Inodes  []listedSet
	Digests []listedSet
	Dups    []listedGroup
	Meta    map[string][]byte
}

type listedRecord struct {
	Path   []byte
	Record Record
}

type listedSet struct {
	Dev, Ino uint64      `json:",omitempty"`
	Backend  key.Backend `json:",omitempty"`
	Digest   []byte      `json:",omitempty"`
	Paths    [][]byte
}

type listedGroup struct {
	Backend                 key.Backend
	Digest                  []byte
	Size, Inodes, Duplicate int64
	Paths                   [][]byte
}

// listIndex reads everything through the public API.
func listIndex(t *testing.T, s *Store) listing {
	t.Helper()
	ctx := context.Background()
	var l listing
	var err error
	if l.Stats, err = s.Stats(); err != nil {
		t.Fatal(err)
	}
	l.Stats.IndexBytes, l.Stats.SchemaVer = 0, 0
	if err := s.Subtree(ctx, []byte("/"), func(path []byte, r Record) error {
		l.Records = append(l.Records, listedRecord{bytes.Clone(path), r})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(l.Records, func(a, b listedRecord) int { return bytes.Compare(a.Path, b.Path) })
	inodes := map[[2]uint64]bool{}
	digests := map[string]bool{}
	for _, e := range l.Records {
		r := e.Record
		if !inodes[[2]uint64{r.Dev, r.Ino}] {
			inodes[[2]uint64{r.Dev, r.Ino}] = true
			ps, err := s.ByInodeAll(r.Dev, r.Ino)
			if err != nil {
				t.Fatal(err)
			}
			l.Inodes = append(l.Inodes, listedSet{Dev: r.Dev, Ino: r.Ino, Paths: sortedPaths(ps)})
		}
		if dk := string(digestKey(nil, &r)); r.Indexed() && !digests[dk] {
			digests[dk] = true
			ps, err := s.ByDigest(r.Backend, r.Digest)
			if err != nil {
				t.Fatal(err)
			}
			l.Digests = append(l.Digests, listedSet{Backend: r.Backend.Base(), Digest: r.Digest, Paths: sortedPaths(ps)})
		}
	}
	slices.SortFunc(l.Inodes, func(a, b listedSet) int {
		if c := cmp.Compare(a.Dev, b.Dev); c != 0 {
			return c
		}
		return cmp.Compare(a.Ino, b.Ino)
	})
	slices.SortFunc(l.Digests, func(a, b listedSet) int {
		return bytes.Compare(append([]byte{byte(a.Backend)}, a.Digest...), append([]byte{byte(b.Backend)}, b.Digest...))
	})
	if err := s.Dups(ctx, DupOptions{}, func(g Group) error {
		lg := listedGroup{Backend: g.Backend, Digest: g.Digest, Size: g.Size, Inodes: g.Inodes, Duplicate: g.Duplicate}
		for _, m := range g.Members {
			lg.Paths = append(lg.Paths, m.Path)
		}
		lg.Paths = sortedPaths(lg.Paths)
		l.Dups = append(l.Dups, lg)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	l.Meta = map[string][]byte{}
	for _, k := range []string{"scan/last", "bin", "audit/cursor", "absent"} {
		v, ok, err := s.GetMeta(k)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			l.Meta[k] = v
		}
	}
	return l
}

func sortedPaths(ps [][]byte) [][]byte {
	out := slices.Clone(ps)
	slices.SortFunc(out, bytes.Compare)
	return out
}
