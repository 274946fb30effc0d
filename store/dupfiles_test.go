package store

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/annexd/annexd/key"
)

// DupFiles lists what Dups with Brief lists, group by group (in digest
// order) and file by file, over more groups than one chunk holds, hard
// links of one inode (no group) and a survey included; a stop from fn
// ends it without an error.
func TestDupFilesAsDups(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	r, sv, seen := surveyFixture(t, s)
	if err := s.PutSurvey(ctx, key.SHA256E, r.Digest, sv, seen); err != nil {
		t.Fatal(err)
	}
	var cs []Change
	for i := range 3 * maxMembersPerTx / 4 { // groups of 2 to 4 files, in many folders
		for j := range 2 + i%3 {
			cs = append(cs, Change{Op: OpPut, Path: p("/d%d/sub%d/f%d-%d", i%7, i%50, i, j),
				Record: rec(fmt.Sprint(i), int64(1+i%100), 1, uint64(10+4*i+j))})
		}
	}
	if err := s.SubmitAll(ctx, cs); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "/h/one", rec("linked", 10, 1, 5))
	mustPut(t, s, "/h/two", rec("linked", 10, 1, 5))
	var want []Group
	if err := s.Dups(ctx, DupOptions{Brief: true}, func(g Group) error { want = append(want, g); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(want, func(a, b Group) int {
		return cmp.Or(cmp.Compare(a.Backend, b.Backend), bytes.Compare(a.Digest, b.Digest))
	})
	i := 0
	err := s.DupFiles(ctx, func(g *GroupFiles) error {
		if i >= len(want) {
			return fmt.Errorf("group %d of %d: %x", i, len(want), g.Digest)
		}
		w := want[i]
		i++
		if g.Backend != w.Backend || !bytes.Equal(g.Digest, w.Digest) || g.Size != w.Size || !reflect.DeepEqual(g.Survey, w.Survey) {
			return fmt.Errorf("group %d: %v %x size %d survey %+v, want %v %x size %d survey %+v",
				i, g.Backend, g.Digest, g.Size, g.Survey, w.Backend, w.Digest, w.Size, w.Survey)
		}
		if len(g.Files) != len(w.Members) {
			return fmt.Errorf("group %d: %d files, want %d", i, len(g.Files), len(w.Members))
		}
		for j, f := range g.Files {
			m := w.Members[j]
			if !bytes.Equal(f.Path, m.Path) || f.Dev != m.Record.Dev || f.Ino != m.Record.Ino ||
				string(f.Path[:f.Dir]) != string(m.Path[:bytes.LastIndexByte(m.Path, '/')+1]) {
				return fmt.Errorf("group %d file %d: %q (dir %q) %d/%d, want %q %d/%d", i, j,
					f.Path, f.Path[:f.Dir], f.Dev, f.Ino, m.Path, m.Record.Dev, m.Record.Ino)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if i != len(want) || len(want) < 2*maxMembersPerTx/4 {
		t.Fatalf("DupFiles listed %d groups, Dups %d", i, len(want))
	}
	n := 0
	if err := s.DupFiles(ctx, func(*GroupFiles) error { n++; return ErrStop }); err != nil || n != 1 {
		t.Fatalf("a stop after the first group: %d groups, %v", n, err)
	}
}
