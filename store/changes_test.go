package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"testing"

	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"

	"github.com/annexd/annexd/key"
)

// content is what a follower of the log knows of one path.
type content struct {
	backend key.Backend
	digest  string
	size    int64
}

// held is the model's meaning for a follower: the content of ok records.
func (m model) held() map[string]content {
	out := map[string]content{}
	for p, r := range m {
		if r.Indexed() {
			out[p] = content{r.Backend.Base(), string(r.Digest), r.Size}
		}
	}
	return out
}

// follower replays the change log the way a hub does.
type follower struct {
	seq   uint64
	paths map[string]content
}

// catchUp applies every change after f.seq; each one must change what the
// follower knows, since the log holds net effects only.
func (f *follower) catchUp(t testing.TB, s *Store) {
	t.Helper()
	for {
		batch, st, err := s.ChangesAfter(f.seq, 7)
		if err != nil {
			t.Fatalf("ChangesAfter(%d): %v", f.seq, err)
		}
		for _, l := range batch {
			if l.Seq != f.seq+1 {
				t.Fatalf("change %d follows %d", l.Seq, f.seq)
			}
			f.seq = l.Seq
			old, had := f.paths[string(l.Path)]
			if l.Tombstone() {
				if !had {
					t.Fatalf("change %d: tombstone of %q, which held nothing", l.Seq, l.Path)
				}
				delete(f.paths, string(l.Path))
				continue
			}
			c := content{l.Backend, string(l.Digest), l.Size}
			if had && old == c {
				t.Fatalf("change %d: %q already held that", l.Seq, l.Path)
			}
			f.paths[string(l.Path)] = c
		}
		if len(batch) == 0 {
			if f.seq != st.Seq {
				t.Fatalf("follower at %d, log at %d", f.seq, st.Seq)
			}
			return
		}
	}
}

func sameHeld(t testing.TB, got, want map[string]content) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("follower holds %d paths %q, index %d %q", len(got), sortedKeys(got), len(want), sortedKeys(want))
	}
	for p, c := range want {
		if got[p] != c {
			t.Fatalf("follower: %q holds %+v, index %+v", p, got[p], c)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestChangesPropertyFollowerMatches applies random changes, some in one
// group commit, and replays the log after each round: the follower must
// hold exactly what the index holds, through renames of directories,
// subtree removals and sweeps.
func TestChangesPropertyFollowerMatches(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "store-changes-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		s, err := Open(filepath.Join(dir, "index.db"), Options{NoSync: true, MaxIdle: 200e3, Changes: true})
		if err != nil {
			rt.Fatal(err)
		}
		stop := runWriter(t, s)
		defer func() {
			stop()
			mustCheckRapid(rt, s)
			s.Close()
		}()
		m := model{}
		f := &follower{paths: map[string]content{}}
		for range rapid.IntRange(1, 8).Draw(rt, "rounds") {
			applyRound(rt, s, m)
			f.catchUp(t, s)
			sameHeld(t, f.paths, m.held())
		}
	})
}

func openChanges(t *testing.T, path string) *Store {
	t.Helper()
	return openTestAt(t, path, Options{MaxDelay: 2e6, NoSync: true, Changes: true})
}

func TestChangesNotLoggedWhenContentStays(t *testing.T) {
	s := openChanges(t, filepath.Join(t.TempDir(), "index.db"))
	r := rec("a", 1, 1, 1)
	mustPut(t, s, "/a", r)
	st0, err := s.ChangeLog()
	if err != nil || st0.Seq != 1 || st0.Floor != 1 || st0.IndexID.IsZero() {
		t.Fatalf("after one put: %+v %v, want seq 1, floor 1, an id", st0, err)
	}
	r.MtimeNs++
	r.VerifiedAt = r.HashedAt + 5
	r.Generation = 9
	mustPut(t, s, "/a", r) // re-verified, touched, marked
	r.Ino = 2
	mustPut(t, s, "/a", r) // another inode, same content
	submitAll(t, s, []Change{{Op: OpMark, Path: []byte("/a"), Gen: 10}})
	if err := s.PutMeta(context.Background(), "x", []byte("y")); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.ChangeLog(); st != st0 {
		t.Fatalf("log moved to %+v on changes that keep the content", st)
	}
	r.State = StatePending
	mustPut(t, s, "/a", r)
	got, _, err := s.ChangesAfter(1, 10)
	if err != nil || len(got) != 1 || !got[0].Tombstone() || string(got[0].Path) != "/a" || got[0].Seq != 2 {
		t.Fatalf("a record that lost its digest: %+v %v, want tombstone 2 of /a", got, err)
	}
}

func TestChangesTrimmedAnswerResendWhole(t *testing.T) {
	s := openChanges(t, filepath.Join(t.TempDir(), "index.db"))
	for i := range 10 {
		mustPut(t, s, string(p("/f%d", i)), rec(string(p("%d", i)), 1, 1, uint64(i+1)))
	}
	if err := s.TrimChanges(context.Background(), 6); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ChangesAfter(5, 10); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("after 5 once 1-6 are trimmed: %v, want ErrTrimmed", err)
	}
	got, st, err := s.ChangesAfter(6, 10)
	if err != nil || len(got) != 4 || got[0].Seq != 7 || st.Floor != 7 || st.Seq != 10 {
		t.Fatalf("after 6: %d changes from %v, state %+v, %v; want 7-10", len(got), got, st, err)
	}
	if _, _, err := s.ChangesAfter(11, 10); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("after 11 of 10: %v, want ErrTrimmed (a consumer ahead of the log)", err)
	}
	if err := s.TrimChanges(context.Background(), 99); err != nil {
		t.Fatal(err)
	}
	if got, st, err := s.ChangesAfter(10, 10); err != nil || len(got) != 0 || st.Floor != 11 {
		t.Fatalf("trimmed past the end: %v %+v %v, want empty from 11", got, st, err)
	}
}

func TestChangesTrimInChunks(t *testing.T) {
	s := openChanges(t, filepath.Join(t.TempDir(), "index.db"))
	var cs []Change
	for i := range trimChunk + 10 {
		cs = append(cs, Change{Op: OpPut, Path: p("/d/f%06d", i), Record: rec(string(p("%d", i)), 1, 1, uint64(i+1))})
	}
	submitAll(t, s, cs)
	if err := s.TrimChanges(context.Background(), trimChunk+5); err != nil {
		t.Fatal(err)
	}
	got, st, err := s.ChangesAfter(trimChunk+5, 100)
	if err != nil || len(got) != 5 || st.Floor != trimChunk+6 {
		t.Fatalf("after a trim of two chunks: %d changes, %+v, %v", len(got), st, err)
	}
}

func submitAll(t *testing.T, s *Store, cs []Change) {
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

func TestChangesOverflowEmptiesTheLog(t *testing.T) {
	defer func(n uint64) { minLogCap = n }(minLogCap)
	minLogCap = 100
	s := openChanges(t, filepath.Join(t.TempDir(), "index.db"))
	// Rewriting one file flips its content each time: the log outgrows
	// max(minLogCap, 2 × records) and is emptied.
	for i := range minLogCap + 1 {
		mustPut(t, s, "/a", rec(string(p("%d", i)), 1, 1, 1))
	}
	st, err := s.ChangeLog()
	if err != nil || st.Seq != minLogCap+1 || st.Floor != st.Seq+1 {
		t.Fatalf("after %d changes of one file: %+v %v, want an empty log at its end", minLogCap+1, st, err)
	}
	if _, _, err := s.ChangesAfter(0, 1); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("a consumer at 0: %v, want ErrTrimmed", err)
	}
}

// TestChangesGapAfterUnloggedWrites opens the index without the log (as
// an annexd that does not know it), writes, and reopens: the log must
// send every consumer back to a whole resend, keeping the index id.
func TestChangesGapAfterUnloggedWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true, Changes: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	mustPut(t, s, "/a", rec("a", 1, 1, 1))
	stop()
	st0, _ := s.ChangeLog()
	s.Close()

	// Reopened with the log: no gap.
	s, err = Open(path, Options{NoSync: true, Changes: true})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := s.ChangeLog(); st != st0 {
		t.Fatalf("reopened: %+v, want %+v", st, st0)
	}
	s.Close()

	// Without the log, a write.
	s, err = Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	stop = runWriter(t, s)
	submitAll(t, s, []Change{{Op: OpDelete, Path: []byte("/a")}})
	if _, err := s.ChangeLog(); !errors.Is(err, ErrNoChanges) {
		t.Fatalf("ChangeLog without Options.Changes: %v, want ErrNoChanges", err)
	}
	stop()
	s.Close()

	s = openChanges(t, path)
	st, err := s.ChangeLog()
	if err != nil || st.IndexID != st0.IndexID || st.Seq != st0.Seq+1 || st.Floor != st.Seq+1 {
		t.Fatalf("after an unlogged write: %+v %v, want id %s and a gap after %d", st, err, st0.IndexID, st0.Seq)
	}
	if _, _, err := s.ChangesAfter(st0.Seq, 10); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("a consumer that had everything before: %v, want ErrTrimmed", err)
	}
}

func TestChangesNewIndexNewID(t *testing.T) {
	dir := t.TempDir()
	a := openChanges(t, filepath.Join(dir, "a.db"))
	b := openChanges(t, filepath.Join(dir, "b.db"))
	sa, _ := a.ChangeLog()
	sb, _ := b.ChangeLog()
	if sa.IndexID == sb.IndexID || sa.Seq != 0 || sa.Floor != 1 {
		t.Fatalf("two new indexes: %+v and %+v", sa, sb)
	}
	if err := a.ResetChanges(); err != nil {
		t.Fatal(err)
	}
	if sr, _ := a.ChangeLog(); sr.IndexID == sa.IndexID || sr.Floor != sr.Seq+1 {
		t.Fatalf("after ResetChanges: %+v, want a new id and an empty log", sr)
	}
}

// TestChangesEnabledOnAnIndexWithRecords: a log started on records it never
// saw begins with a gap, so a consumer at 0 does not take them as known.
func TestChangesEnabledOnAnIndexWithRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, s)
	mustPut(t, s, "/a", rec("a", 1, 1, 1))
	stop()
	s.Close()
	s = openChanges(t, path)
	if _, _, err := s.ChangesAfter(0, 10); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("consumer at 0: %v, want ErrTrimmed", err)
	}
}

func TestChangesDrop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true, Changes: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DropChanges(); err == nil {
		t.Fatal("DropChanges of a log in use succeeded")
	}
	s.Close()
	s = openTestAt(t, path, Options{NoSync: true})
	if err := s.DropChanges(); err != nil {
		t.Fatal(err)
	}
	err = s.view(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketChanges) != nil {
			return errors.New("changes bucket still there")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestChangesSnapshotThenLog takes a snapshot while writes go on, then
// replays the log after its sequence: the follower must end where the
// index is.
func TestChangesSnapshotThenLog(t *testing.T) {
	s := openChanges(t, filepath.Join(t.TempDir(), "index.db"))
	ctx := context.Background()
	m := model{}
	var cs []Change
	for i := range 3000 {
		r := rec(string(p("%d", i%500)), 7, 1, uint64(i+1))
		path := p("/d%d/f%d", i%13, i)
		cs = append(cs, Change{Op: OpPut, Path: path, Record: r})
		m[string(path)] = r
	}
	submitAll(t, s, cs)
	f := &follower{paths: map[string]content{}}
	writes := 0
	st, err := s.SnapshotChanges(ctx, func(l Logged) error {
		f.paths[string(l.Path)] = content{l.Backend, string(l.Digest), l.Size}
		if writes < 50 { // changes made during the snapshot
			victim := cs[len(cs)-1-writes*7].Path
			if writes%2 == 0 {
				submitAll(t, s, []Change{{Op: OpDelete, Path: victim}})
				delete(m, string(victim))
			} else {
				r := rec("new", 9, 2, uint64(writes))
				if err := s.Put(ctx, victim, r); err != nil {
					return err
				}
				m[string(victim)] = r
			}
			writes++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f.seq = st.Seq
	for {
		batch, _, err := s.ChangesAfter(f.seq, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) == 0 {
			break
		}
		for _, l := range batch {
			f.seq = l.Seq
			if l.Tombstone() {
				delete(f.paths, string(l.Path))
			} else {
				f.paths[string(l.Path)] = content{l.Backend, string(l.Digest), l.Size}
			}
		}
	}
	sameHeld(t, f.paths, m.held())
}

func TestChangesEntryRoundTrip(t *testing.T) {
	d := bytes.Repeat([]byte{7}, 32)
	for _, l := range []Logged{
		{Seq: 1, Path: []byte("/a\xff/b"), Backend: key.SHA256, Digest: d, Size: 1 << 40},
		{Seq: 2, Path: []byte("/x")},
	} {
		got, err := decodeLogged(l.Seq, appendLogged(nil, &l))
		if err != nil || !bytes.Equal(got.Path, l.Path) || !sameContent(&got, &l) {
			t.Fatalf("round trip of %+v: %+v %v", l, got, err)
		}
	}
	for _, bad := range [][]byte{nil, {0}, {5, '/'}, {2, '/', 'a', 99}, {2, '/', 'a', byte(key.SHA256), 1}} {
		if _, err := decodeLogged(1, bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decode %x: %v, want ErrCorrupt", bad, err)
		}
	}
}

func TestChangesCheckFindsADamagedLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := Open(path, Options{NoSync: true, Changes: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stop := runWriter(t, s)
	mustPut(t, s, "/a", rec("a", 1, 1, 1))
	stop()
	if rep, err := s.Check(); err != nil || !rep.OK() {
		t.Fatalf("a sound log: %+v %v", rep.Problems, err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		log := tx.Bucket(bucketChanges).Bucket(bucketLog)
		if err := log.Put(seqKey(99), []byte{1, '/', 9}); err != nil {
			return err
		}
		return log.Put([]byte("x"), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Check()
	if err != nil || len(rep.Problems) != 3 {
		t.Fatalf("a log with an entry past its end that does not decode, and a bad key: %q %v", rep.Problems, err)
	}
}
