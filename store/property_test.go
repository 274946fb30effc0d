package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/annexd/annexd/key"
)

// model is the plain in-memory meaning of the index: path → record.
type model map[string]Record

func under(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

func (m model) deleteSubtree(dir string) {
	for p := range m {
		if under(p, dir) {
			delete(m, p)
		}
	}
}

// move is Move: every record at or below from goes to the same place under
// to, unless to's side holds a record there already.
func (m model) move(from, to string) error {
	found := false
	for p, r := range m {
		if !under(p, from) {
			continue
		}
		found = true
		if _, taken := m[to+p[len(from):]]; !taken && from != to {
			delete(m, p)
			m[to+p[len(from):]] = r
		}
	}
	if !found {
		return ErrNotFound
	}
	return nil
}

// groups computes the duplicate groups the way Dups defines them.
func (m model) groups() map[string]Group {
	out := map[string]Group{}
	inodes := map[string]map[[2]uint64]bool{}
	for p, r := range m {
		if !r.Indexed() {
			continue
		}
		dk := string(digestKey(nil, &r))
		g := out[dk]
		g.Size = r.Size
		g.Members = append(g.Members, Member{Path: []byte(p), Record: r})
		if inodes[dk] == nil {
			inodes[dk] = map[[2]uint64]bool{}
		}
		inodes[dk][[2]uint64{r.Dev, r.Ino}] = true
		g.Inodes = int64(len(inodes[dk]))
		g.Duplicate = g.Size * (g.Inodes - 1)
		out[dk] = g
	}
	return out
}

var (
	comps   = []string{"a", "b", "c\xff"}
	genPath = rapid.Custom(func(t *rapid.T) string {
		n := rapid.IntRange(1, 3).Draw(t, "depth")
		var sb strings.Builder
		for range n {
			sb.WriteString("/" + rapid.SampledFrom(comps).Draw(t, "comp"))
		}
		return sb.String()
	})
	// genDir is a subtree root: the root directory itself now and then.
	genDir = rapid.Custom(func(t *rapid.T) string {
		if rapid.IntRange(0, 5).Draw(t, "isRoot") == 0 {
			return "/"
		}
		return genPath.Draw(t, "dir")
	})
	genRecord = rapid.Custom(func(t *rapid.T) Record {
		content := rapid.IntRange(0, 3).Draw(t, "content")
		d := sha256.Sum256([]byte{byte(content)})
		r := Record{
			Backend: rapid.SampledFrom([]key.Backend{key.SHA256E, key.SHA256}).Draw(t, "backend"),
			Digest:  d[:], Size: int64(content * 1000),
			MtimeNs:    rapid.Int64().Draw(t, "mtime"),
			CtimeNs:    rapid.Int64().Draw(t, "ctime"),
			Dev:        1,
			Ino:        rapid.Uint64Range(1, 6).Draw(t, "ino"),
			HashedAt:   rapid.Int64().Draw(t, "hashed"),
			VerifiedAt: rapid.Int64().Draw(t, "verified"),
			State:      rapid.SampledFrom([]State{StateOK, StateOK, StateOK, StateCorrupt}).Draw(t, "state"),
			Generation: rapid.Uint64Range(0, 3).Draw(t, "gen"),
		}
		if rapid.IntRange(0, 9).Draw(t, "nodigest") == 0 {
			r.Backend, r.Digest, r.State = key.Unknown, nil, StateUnreadable
		}
		return r
	})
)

// TestPropertyMatchesModel applies random changes, some in one group
// commit, to the store and to the model, and compares every query.
func TestPropertyMatchesModel(t *testing.T) {
	t.Run("direct", func(t *testing.T) { propertyMatchesModel(t, Options{}) })
	// Every group defers its digest entries, and only a read that needs
	// the groups merges them: the checks and reads meet pending entries,
	// pending entries removed or replaced, and merges between them.
	t.Run("deferred", func(t *testing.T) { propertyMatchesModel(t, Options{deferAt: 1, mergeIdle: time.Hour}) })
}

func propertyMatchesModel(t *testing.T, opts Options) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "store-prop-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		opts.NoSync, opts.MaxIdle = true, 200e3
		s, err := Open(filepath.Join(dir, "index.db"), opts)
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
		rounds := rapid.IntRange(1, 8).Draw(rt, "rounds")
		for range rounds {
			applyRound(rt, s, m)
			compare(rt, s, m)
		}
	})
}

func applyRound(rt *rapid.T, s *Store, m model) {
	n := rapid.IntRange(1, 12).Draw(rt, "changes")
	var (
		wg   sync.WaitGroup
		errs = make([]error, n)
		want = make([]error, n)
	)
	ctx := context.Background()
	for i := range n {
		var c Change
		switch rapid.IntRange(0, 9).Draw(rt, "op") {
		case 0, 1, 2, 3:
			c = Change{Op: OpPut, Path: []byte(genPath.Draw(rt, "path")), Record: genRecord.Draw(rt, "rec")}
			m[string(c.Path)] = c.Record
		case 4:
			c = Change{Op: OpDelete, Path: []byte(genPath.Draw(rt, "path"))}
			delete(m, string(c.Path))
		case 5:
			c = Change{Op: OpDeleteSubtree, Path: []byte(genDir.Draw(rt, "path"))}
			m.deleteSubtree(string(c.Path))
		case 6, 7:
			from, to := genPath.Draw(rt, "from"), genPath.Draw(rt, "to")
			if under(to, from) || under(from, to) {
				continue
			}
			c = Change{Op: OpMove, Path: []byte(from), NewPath: []byte(to)}
			want[i] = m.move(from, to)
		case 8:
			path, gen := genPath.Draw(rt, "path"), rapid.Uint64Range(0, 4).Draw(rt, "gen")
			c = Change{Op: OpMark, Path: []byte(path), Gen: gen}
			if r, ok := m[path]; ok {
				r.Generation = gen
				m[path] = r
			}
		case 9:
			root, gen := genDir.Draw(rt, "root"), rapid.Uint64Range(0, 4).Draw(rt, "gen")
			// Sweep reads then deletes: it cannot share a group with
			// queued changes, so flush first.
			wg.Wait()
			if _, err := s.Sweep(ctx, []byte(root), gen, nil); err != nil {
				rt.Fatalf("Sweep: %v", err)
			}
			for p, r := range m {
				if under(p, root) && r.Generation < gen {
					delete(m, p)
				}
			}
			continue
		}
		wg.Add(1)
		s.Submit(c, func(err error) { errs[i] = err; wg.Done() })
	}
	wg.Wait()
	for i := range n {
		if !errors.Is(errs[i], want[i]) || (want[i] == nil && errs[i] != nil) {
			rt.Fatalf("change %d: got %v, want %v", i, errs[i], want[i])
		}
	}
}

func compare(rt *rapid.T, s *Store, m model) {
	ctx := context.Background()
	got := model{}
	if err := s.Subtree(ctx, []byte("/"), func(path []byte, r Record) error {
		got[string(path)] = r
		return nil
	}); err != nil {
		rt.Fatal(err)
	}
	if len(got) != len(m) {
		rt.Fatalf("store has %d records %q, model %d %q", len(got), keys(got), len(m), keys(m))
	}
	for p, r := range m {
		g, ok, err := s.Get([]byte(p))
		if err != nil || !ok || !g.Equal(&r) {
			rt.Fatalf("Get(%q) = %+v %v %v, want %+v", p, g, ok, err, r)
		}
		if sr := got[p]; !sr.Equal(&r) {
			rt.Fatalf("Scan %q = %+v, want %+v", p, sr, r)
		}
		all, _ := s.ByInodeAll(r.Dev, r.Ino)
		if want := m.paths(func(o Record) bool { return o.Dev == r.Dev && o.Ino == r.Ino }); !slices.Equal(sorted(paths(all)), want) {
			rt.Fatalf("ByInodeAll(%d,%d) = %q, want %q", r.Dev, r.Ino, paths(all), want)
		}
		if r.Indexed() {
			bd, _ := s.ByDigest(r.Backend, r.Digest)
			want := m.paths(func(o Record) bool {
				return o.Indexed() && o.Backend.Base() == r.Backend.Base() && bytes.Equal(o.Digest, r.Digest)
			})
			if got := sorted(paths(bd)); !slices.Equal(got, want) {
				rt.Fatalf("ByDigest of %q = %q, want %q", p, got, want)
			}
		}
	}
	dir := genDir.Draw(rt, "subtree")
	var sub []string
	if err := s.Subtree(ctx, []byte(dir), func(path []byte, _ Record) error {
		sub = append(sub, string(path))
		return nil
	}); err != nil {
		rt.Fatal(err)
	}
	if want := keys(m.subtree(dir)); !slices.Equal(sorted(sub), want) {
		rt.Fatalf("Subtree(%q) = %q, want %q", dir, sorted(sub), want)
	}
	mustCheckRapid(rt, s) // before Dups merges what is pending
	compareGroups(rt, s, m)
}

// paths lists the model's paths whose record satisfies keep, sorted.
func (m model) paths(keep func(Record) bool) []string {
	var out []string
	for p, r := range m {
		if keep(r) {
			out = append(out, p)
		}
	}
	return sorted(out)
}

func (m model) subtree(dir string) model {
	out := model{}
	for p, r := range m {
		if under(p, dir) {
			out[p] = r
		}
	}
	return out
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

func compareGroups(rt *rapid.T, s *Store, m model) {
	want := m.groups()
	var st Stats
	var err error
	if st, err = s.Stats(); err != nil {
		rt.Fatal(err)
	}
	var files, bytes_, digested, dupGroups, wasted int64
	for _, r := range m {
		files++
		bytes_ += r.Size
		if r.Indexed() {
			digested++
		}
	}
	var order []Group
	for dk, g := range want {
		if g.Inodes >= 2 {
			dupGroups++
			wasted += g.Duplicate
			g.Digest = []byte(dk)
			order = append(order, g)
		}
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].Duplicate != order[j].Duplicate {
			return order[i].Duplicate > order[j].Duplicate
		}
		return bytes.Compare(order[i].Digest, order[j].Digest) < 0
	})
	wantSt := Stats{Files: files, Bytes: bytes_, Digested: digested, Unique: int64(len(want)), DupGroups: dupGroups, Duplicate: wasted}
	// Before Dups merges them, pending entries are digested but ungrouped.
	if st.Files != files || st.Bytes != bytes_ || st.Digested != digested || st.Ungrouped > digested {
		rt.Fatalf("Stats = %+v, want %+v and at most %d ungrouped", st, wantSt, digested)
	}
	for _, brief := range []bool{false, true} {
		if err := compareDups(s, order, brief); err != nil {
			rt.Fatalf("Dups (brief %v): %v", brief, err)
		}
	}
	if st, err = s.Stats(); err != nil {
		rt.Fatal(err)
	}
	gotSt := Stats{Files: st.Files, Bytes: st.Bytes, Digested: st.Digested, Unique: st.Unique, DupGroups: st.DupGroups, Duplicate: st.Duplicate}
	if gotSt != wantSt || st.Ungrouped != 0 {
		rt.Fatalf("Stats after Dups = %+v, want %+v and none ungrouped", st, wantSt)
	}
}

// compareDups lists the groups with Dups and compares them with order;
// brief members are compared with what the digest index keeps of the
// model's records.
func compareDups(s *Store, order []Group, brief bool) error {
	i := 0
	err := s.Dups(context.Background(), DupOptions{Brief: brief}, func(g Group) error {
		if i >= len(order) {
			return fmt.Errorf("extra group %x", g.Digest)
		}
		w := order[i]
		dk := append([]byte{byte(g.Backend)}, g.Digest...)
		if !bytes.Equal(dk, w.Digest) || g.Duplicate != w.Duplicate || g.Inodes != w.Inodes || g.Size != w.Size {
			return fmt.Errorf("group %d = %x size %d wasted %d inodes %d, want %x size %d wasted %d inodes %d",
				i, dk, g.Size, g.Duplicate, g.Inodes, w.Digest, w.Size, w.Duplicate, w.Inodes)
		}
		want := w.Members
		if brief {
			want = briefMembers(want)
		}
		if err := sameMembers(g.Members, want); err != nil {
			return fmt.Errorf("group %d (%x): %w", i, dk, err)
		}
		i++
		return nil
	})
	if err == nil && i != len(order) {
		err = fmt.Errorf("Dups listed %d groups, want %d", i, len(order))
	}
	return err
}

// briefMembers keeps of each member's record what DupOptions.Brief lists.
func briefMembers(ms []Member) []Member {
	out := make([]Member, len(ms))
	for i, m := range ms {
		r := m.Record
		out[i] = Member{Path: m.Path, Record: Record{Backend: r.Backend, Digest: r.Digest, Size: r.Size,
			Dev: r.Dev, Ino: r.Ino, State: r.State}}
	}
	return out
}

// sameMembers compares a group's members with the model's, in any order.
func sameMembers(got, want []Member) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d members, want %d", len(got), len(want))
	}
	byPath := map[string]Record{}
	for _, w := range want {
		byPath[string(w.Path)] = w.Record
	}
	for _, g := range got {
		w, ok := byPath[string(g.Path)]
		if !ok || !g.Record.Equal(&w) {
			return fmt.Errorf("member %q %+v, want %+v (listed %v)", g.Path, g.Record, w, ok)
		}
	}
	return nil
}

func keys(m model) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func mustCheckRapid(rt *rapid.T, s *Store) {
	rep, err := s.Check()
	if err != nil {
		rt.Fatal(err)
	}
	if !rep.OK() {
		rt.Fatalf("invariants: %q", rep.Problems)
	}
}
