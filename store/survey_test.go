package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/annexd/annexd/key"
)

// TestSurveyFigures: reclaimable bytes are, per device, what the inodes
// hold alone less what the one holding least holds, of the inodes
// surveyed; shared inodes are one physical copy; a filter leaves inodes
// out.
func TestSurveyFigures(t *testing.T) {
	sv := Survey{Inodes: []SurveyInode{
		{Dev: 1, Ino: 1, Placed: 100, Alone: 0, Copy: 0, Known: true},   // shares with ino 2
		{Dev: 1, Ino: 2, Placed: 100, Alone: 0, Copy: 0, Known: true},   //
		{Dev: 1, Ino: 3, Placed: 60, Alone: 60, Copy: 2, Known: true},   // its own, 40 bytes of holes
		{Dev: 1, Ino: 4, Placed: 100, Alone: 100, Copy: 3},              // not surveyed: nothing to act on
		{Dev: 2, Ino: 1, Placed: 100, Alone: 100, Copy: 4, Known: true}, // alone on its device
	}}
	if err := sv.check(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name          string
		keep          func(int) bool
		rec           int64
		phys, unknown int
	}{
		{"all", nil, 60, 4, 1},
		{"the twins", func(i int) bool { return i < 2 }, 0, 1, 0},
		{"a twin and the sparse copy", func(i int) bool { return i == 1 || i == 2 }, 60, 2, 0},
		{"without the twins", func(i int) bool { return i >= 2 }, 0, 3, 1},
		{"a twin and the one not surveyed", func(i int) bool { return i == 0 || i == 3 }, 0, 2, 1},
		{"one per device", func(i int) bool { return i == 2 || i == 4 }, 0, 2, 0},
	} {
		if r, p, u := sv.Reclaimable(c.keep), sv.Physical(c.keep), sv.Unknown(c.keep); r != c.rec || p != c.phys || u != c.unknown {
			t.Errorf("%s: reclaimable %d, physical %d, unknown %d; want %d %d %d", c.name, r, p, u, c.rec, c.phys, c.unknown)
		}
	}
	if !sv.Shared(1) || sv.Shared(2) || sv.Find(1, 3) != 2 || sv.Find(2, 2) != -1 {
		t.Errorf("Shared or Find wrong")
	}
	for _, bad := range []Survey{
		{Inodes: []SurveyInode{{Dev: 1, Ino: 2}, {Dev: 1, Ino: 1, Copy: 1}}},          // out of order
		{Inodes: []SurveyInode{{Dev: 1, Ino: 1}, {Dev: 2, Ino: 1, Copy: 0}}},          // a copy across devices
		{Inodes: []SurveyInode{{Dev: 1, Ino: 1, Placed: 5, Alone: 6}}},                // more alone than placed
		{Inodes: []SurveyInode{{Dev: 1, Ino: 1, Copy: 1}, {Dev: 1, Ino: 2, Copy: 1}}}, // a copy named ahead
	} {
		if bad.check() == nil {
			t.Errorf("survey %+v passes its check", bad.Inodes)
		}
	}
}

// surveyFixture puts a group of three inodes of 1000 bytes, one with two
// names, and returns its survey as a look at the files would make it:
// inodes 1 and 2 share blocks, inode 3 holds all its bytes alone.
func surveyFixture(t *testing.T, s *Store) (Record, Survey, []Seen) {
	t.Helper()
	r := rec("survey", 1000, 7, 1)
	mustPut(t, s, "/r/a", r)
	mustPut(t, s, "/r/a2", r)
	r2, r3 := r, r
	r2.Ino, r3.Ino = 2, 3
	mustPut(t, s, "/r/b", r2)
	mustPut(t, s, "/r/c", r3)
	sv := Survey{At: 42, Inodes: []SurveyInode{
		{Dev: 7, Ino: 1, Placed: 1024, Alone: 0, Copy: 0, Known: true},
		{Dev: 7, Ino: 2, Placed: 1024, Alone: 0, Copy: 0, Known: true},
		{Dev: 7, Ino: 3, Placed: 1024, Alone: 1024, Copy: 2, Known: true},
	}}
	seen := make([]Seen, 3)
	for i := range seen {
		seen[i] = Seen{Size: r.Size, MtimeNs: r.MtimeNs, CtimeNs: r.CtimeNs}
	}
	return r, sv, seen
}

// surveyStats returns what Stats says of surveys.
func surveyStats(t *testing.T, s *Store) [3]int64 {
	t.Helper()
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return [3]int64{st.Surveyed, st.SurveyedDup, st.Reclaimable}
}

// groupSurvey returns the survey Dups lists with the only group.
func groupSurvey(t *testing.T, s *Store) *Survey {
	t.Helper()
	var got []*Survey
	err := s.Dups(context.Background(), DupOptions{Brief: true}, func(g Group) error {
		got = append(got, g.Survey)
		return nil
	})
	if err != nil || len(got) != 1 {
		t.Fatalf("dups: %d groups, %v", len(got), err)
	}
	return got[0]
}

// TestSurveyKeptUntilChange: a survey of what the records say is kept,
// listed with its group and counted; any change to a record of the group
// drops it (a new mtime, a rename, a member gone, a new member), and so
// does DropSurvey. The invariant check at cleanup recounts the counters.
func TestSurveyKeptUntilChange(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		change func(t *testing.T, s *Store, r Record)
	}{
		{"rewritten in place", func(t *testing.T, s *Store, r Record) {
			r.MtimeNs++
			mustPut(t, s, "/r/c", with(r, 3))
		}},
		{"renamed", func(t *testing.T, s *Store, r Record) {
			if _, err := s.Move(ctx, []byte("/r/b"), []byte("/r/b.moved")); err != nil {
				t.Fatal(err)
			}
		}},
		{"a copy gone", func(t *testing.T, s *Store, r Record) {
			if err := s.SubmitAll(ctx, []Change{{Op: OpDelete, Path: []byte("/r/c")}}); err != nil {
				t.Fatal(err)
			}
		}},
		{"a new copy", func(t *testing.T, s *Store, r Record) { mustPut(t, s, "/r/d", with(r, 4)) }},
		{"dropped", func(t *testing.T, s *Store, r Record) {
			s.DropSurvey(r.Backend, r.Digest)
			if err := s.PutMeta(ctx, "after", nil); err != nil { // applied in order: the drop is in
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t)
			r, sv, seen := surveyFixture(t, s)
			if err := s.PutSurvey(ctx, key.SHA256E, r.Digest, sv, seen); err != nil {
				t.Fatal(err)
			}
			if got := surveyStats(t, s); got != [3]int64{1, 2000, 1024} {
				t.Fatalf("after the put: surveyed, duplicate, reclaimable %v, want [1 2000 1024]", got)
			}
			if g := groupSurvey(t, s); g == nil || g.At != 42 || len(g.Inodes) != 3 || !g.Shared(0) {
				t.Fatalf("listed survey %+v", g)
			}
			c.change(t, s, r)
			if got := surveyStats(t, s); got != [3]int64{} {
				t.Errorf("after the change: surveyed, duplicate, reclaimable %v, want none", got)
			}
			if g := groupSurvey(t, s); g != nil {
				t.Errorf("the group still lists its survey %+v", g)
			}
		})
	}
}

// with returns r with inode ino.
func with(r Record, ino uint64) Record {
	r.Ino = ino
	return r
}

// TestSurveyRefusedWhenFilesDiffer: a survey that saw a file other than
// its record, or other inodes than the group's, is not kept, and drops
// the survey kept before; an audit's new verification time keeps it.
func TestSurveyRefusedWhenFilesDiffer(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	r, sv, seen := surveyFixture(t, s)
	if err := s.PutSurvey(ctx, key.SHA256E, r.Digest, sv, seen); err != nil {
		t.Fatal(err)
	}
	v := with(r, 3)
	v.VerifiedAt = r.HashedAt + 1
	mustPut(t, s, "/r/c", v) // an audit's pass changes no identity
	if got := surveyStats(t, s); got != [3]int64{1, 2000, 1024} {
		t.Fatalf("after a verification: %v, want the survey kept", got)
	}
	newer := append([]Seen(nil), seen...)
	newer[1].CtimeNs++ // the file changed; its record does not say so yet
	if err := s.PutSurvey(ctx, key.SHA256E, r.Digest, sv, newer); !errors.Is(err, ErrConflict) {
		t.Errorf("survey of a changed file: %v, want ErrConflict", err)
	}
	if got := surveyStats(t, s); got != [3]int64{} {
		t.Errorf("after a refused survey: %v, want the older one dropped", got)
	}
	other := sv
	other.Inodes = append([]SurveyInode(nil), sv.Inodes...)
	other.Inodes[2].Ino = 9
	if err := s.PutSurvey(ctx, key.SHA256E, r.Digest, other, seen); !errors.Is(err, ErrConflict) {
		t.Errorf("survey of other inodes: %v, want ErrConflict", err)
	}
	short := Survey{Inodes: sv.Inodes[:2]}
	if err := s.PutSurvey(ctx, key.SHA256E, r.Digest, short, seen[:2]); !errors.Is(err, ErrConflict) {
		t.Errorf("survey of two of three inodes: %v, want ErrConflict", err)
	}
	lone := rec("alone", 10, 7, 20)
	mustPut(t, s, "/r/lone", lone)
	if err := s.PutSurvey(ctx, key.SHA256E, lone.Digest, sv, seen); !errors.Is(err, ErrConflict) {
		t.Errorf("survey of a digest that is no group: %v, want ErrConflict", err)
	}
	if err := s.PutSurvey(ctx, key.SHA256E, r.Digest, Survey{}, nil); !errors.Is(err, ErrRecord) {
		t.Errorf("empty survey: %v, want ErrRecord", err)
	}
}

// TestSurveySurvivesReopen: a kept survey and its counters are in the
// index file, and DupGroup reads the group with it.
func TestSurveySurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/index.db"
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	r, sv, seen := surveyFixture(t, s)
	if err := s.PutSurvey(ctx, key.SHA256E, r.Digest, sv, seen); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestAt(t, path, Options{NoSync: true})
	if got := surveyStats(t, s); got != [3]int64{1, 2000, 1024} {
		t.Errorf("reopened: %v", got)
	}
	g, ok, err := s.DupGroup(key.SHA256, r.Digest, DupOptions{Brief: true})
	if err != nil || !ok || g.Survey == nil || g.Survey.Reclaimable(nil) != 1024 || len(g.Members) != 4 || g.Duplicate != 2000 {
		t.Errorf("DupGroup: %+v %v %v", g, ok, err)
	}
	if _, ok, err := s.DupGroup(key.SHA256E, rec("none", 1, 1, 1).Digest, DupOptions{}); ok || err != nil {
		t.Errorf("DupGroup of no group: %v %v", ok, err)
	}
}

// TestSurveyNewerWins: surveys made at once may arrive in any order; the
// one made last stays. A survey made before a DropSurvey (a run shared
// blocks meanwhile) is refused, one made after is kept.
func TestSurveyNewerWins(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	r, sv, seen := surveyFixture(t, s)
	newer, older := sv, sv
	newer.At, older.At = 2000, 1000
	newer.Inodes = append([]SurveyInode(nil), sv.Inodes...)
	newer.Inodes[2] = SurveyInode{Dev: 7, Ino: 3, Placed: 1024, Alone: 0, Copy: 0, Known: true} // shared since
	if err := s.PutSurvey(ctx, key.SHA256E, r.Digest, newer, seen); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSurvey(ctx, key.SHA256E, r.Digest, older, seen); !errors.Is(err, ErrConflict) {
		t.Errorf("an older survey after a newer one: %v, want ErrConflict", err)
	}
	if g := groupSurvey(t, s); g == nil || g.At != 2000 || g.Reclaimable(nil) != 0 {
		t.Errorf("kept survey %+v, want the newer one", g)
	}
	before := Survey{At: time.Now().UnixNano() - int64(time.Second), Inodes: sv.Inodes}
	s.DropSurvey(r.Backend, r.Digest)
	if err := s.PutSurvey(ctx, key.SHA256E, r.Digest, before, seen); !errors.Is(err, ErrConflict) {
		t.Errorf("a survey made before DropSurvey: %v, want ErrConflict", err)
	}
	if got := surveyStats(t, s); got != [3]int64{} {
		t.Errorf("after the drop: %v, want no survey", got)
	}
	after := Survey{At: time.Now().UnixNano(), Inodes: sv.Inodes}
	if err := s.PutSurvey(ctx, key.SHA256E, r.Digest, after, seen); err != nil {
		t.Errorf("a survey made after DropSurvey: %v", err)
	}
}
