package dedup

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/key"
	"github.com/annexd/annexd/store"
)

// physicalTree makes, under dir, one content of 1 MiB (256 KiB of data,
// then zeros) five ways: orig written whole; twin a reflink of orig;
// copy written whole, with a hard link; sparse written without its zeros
// (holes). The zeros make a sparse copy possible.
func physicalTree(t *testing.T, fs *loopfs.FS) (data []byte, names map[string]string) {
	t.Helper()
	data = make([]byte, 1<<20)
	copy(data, content(9, 256<<10))
	names = map[string]string{"orig": fs.Path("p/orig"), "twin": fs.Path("p/twin"), "copy": fs.Path("p/copy"),
		"link": fs.Path("p/link"), "sparse": fs.Path("p/sparse")}
	writeFile(t, names["orig"], data)
	clone(t, names["orig"], names["twin"])
	writeFile(t, names["copy"], data)
	if err := os.Link(names["copy"], names["link"]); err != nil {
		t.Fatal(err)
	}
	writeFile(t, names["sparse"], data[:256<<10])
	if err := os.Truncate(names["sparse"], int64(len(data))); err != nil {
		t.Fatal(err)
	}
	return data, names
}

// clone makes dst a reflink of src (FICLONE), as cp --reflink does.
func clone(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
		t.Fatalf("FICLONE %s: %v", dst, err)
	}
}

// groupOf reads the one duplicate group of the index.
func groupOf(t *testing.T, st *store.Store) store.Group {
	t.Helper()
	var gs []store.Group
	err := st.Dups(context.Background(), store.DupOptions{}, func(g store.Group) error {
		gs = append(gs, g)
		return nil
	})
	if err != nil || len(gs) != 1 {
		t.Fatalf("dups: %d groups, %v", len(gs), err)
	}
	return gs[0]
}

// inodeOf returns the survey's entry of path's inode.
func inodeOf(t *testing.T, sv store.Survey, path string) store.SurveyInode {
	t.Helper()
	fi := lstat(t, path)
	i := sv.Find(fi.Dev, fi.Ino)
	if i < 0 {
		t.Fatalf("%s is not in the survey", path)
	}
	return sv.Inodes[i]
}

// TestSurveyPhysical, on XFS and btrfs: a survey tells the reflinked twin
// as the same physical copy, counts a hard link once and a hole as
// nothing; the plan keeps the copy that frees most when the others share
// its blocks (not the copy with two names, whose blocks are its own),
// plans exactly what the survey calls reclaimable, and the run frees that
// much, as statfs sees it; the group's survey is then renewed in the
// index: one physical copy, nothing reclaimable, as soon as the run
// returns (the index commits each change 300 ms late here: a run that
// did not wait for its surveys left the old one in place meanwhile).
func TestSurveyPhysical(t *testing.T) {
	for _, kind := range []loopfs.Kind{loopfs.XFS, loopfs.Btrfs} {
		t.Run(string(kind), func(t *testing.T) {
			fs := loopfs.New(t, kind, loopfs.Options{Size: loopfs.MinSize[kind] + 64<<20})
			st := openStoreWith(t, store.Options{MaxDelay: 300 * time.Millisecond, MaxIdle: 300 * time.Millisecond})
			data, n := physicalTree(t, fs)
			for _, p := range n {
				record(t, st, p)
			}
			g := groupOf(t, st)
			sv, seen := SurveyGroup(g)
			if len(sv.Inodes) != 4 || len(seen) != 4 {
				t.Fatalf("survey of %d inodes, want 4 (the hard link is one)", len(sv.Inodes))
			}
			orig, twin, cp, sparse := inodeOf(t, sv, n["orig"]), inodeOf(t, sv, n["twin"]), inodeOf(t, sv, n["copy"]), inodeOf(t, sv, n["sparse"])
			if orig.Copy != twin.Copy || cp.Copy == orig.Copy || sparse.Copy == orig.Copy || sparse.Copy == cp.Copy {
				t.Errorf("copies: orig %d twin %d copy %d sparse %d; want the twin with orig and the others apart",
					orig.Copy, twin.Copy, cp.Copy, sparse.Copy)
			}
			if orig.Alone != 0 || twin.Alone != 0 || cp.Alone != 1<<20 || sparse.Alone != 256<<10 || sparse.Placed != 256<<10 {
				t.Errorf("alone: orig %d twin %d copy %d sparse %d (placed %d); want 0, 0, 1 MiB, 256 KiB (256 KiB)",
					orig.Alone, twin.Alone, cp.Alone, sparse.Alone, sparse.Placed)
			}
			const want = 1<<20 + 256<<10
			if r, p := sv.Reclaimable(nil), sv.Physical(nil); r != want || p != 3 {
				t.Errorf("reclaimable %d, physical %d; want %d, 3", r, p, want)
			}

			free := fs.Free(t)
			plan, res, err := runDedup(t, New(st, Options{}), Request{})
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if len(plan.Groups) != 1 || plan.Frees != want || plan.Shared != 1 || plan.Actions != 2 {
				t.Fatalf("plan frees %d in %d actions (%d shared already); want %d in 2 (1)", plan.Frees, plan.Actions, plan.Shared, want)
			}
			if k := string(plan.Groups[0].Keeper.Path); k != n["orig"] && k != n["twin"] {
				t.Errorf("keeper %s, want orig or its twin: their blocks are shared already", k)
			}
			gained := fs.Free(t) - free
			if res.Done != 2 || res.Freed != want {
				t.Errorf("done %d, freed %d; want 2, %d", res.Done, res.Freed, want)
			}
			if gained < want*9/10 || gained > want*11/10 {
				t.Errorf("statfs gained %d bytes, the survey said %d", gained, want)
			}
			for _, p := range n {
				assertContent(t, p, data)
			}
			// The run renewed the survey the index keeps.
			g = groupOf(t, st)
			if g.Survey == nil {
				t.Fatal("no survey kept after the run")
			}
			if r, p := g.Survey.Reclaimable(nil), g.Survey.Physical(nil); r != 0 || p != 1 {
				t.Errorf("kept survey after the run: reclaimable %d, physical %d; want 0, 1", r, p)
			}
			if st2, err := st.Stats(); err != nil || st2.Reclaimable != 0 || st2.Surveyed != 1 || st2.SurveyedDup != 3<<20 {
				t.Errorf("stats after the run: %+v %v", st2, err)
			}
		})
	}
}

// TestSurveyGoneFile: an inode whose names no longer open as it is not
// known, and reclaims nothing: a run could not act on it. The store keeps
// such a survey (until the record changes), but not one of a file that
// changed since its record.
func TestSurveyGoneFile(t *testing.T) {
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: loopfs.MinSize[loopfs.XFS]})
	st := openStore(t)
	data := content(3, 100_000)
	a, b := fs.Path("a"), fs.Path("b")
	writeFile(t, a, data)
	writeFile(t, b, data)
	record(t, st, a)
	record(t, st, b)
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	writeFile(t, b, data) // another inode now
	g := groupOf(t, st)
	sv, seen := SurveyGroup(g)
	if sv.Unknown(nil) != 1 || sv.Reclaimable(nil) != 0 || sv.Physical(nil) != 2 {
		t.Errorf("unknown %d, reclaimable %d, physical %d; want 1, 0, 2", sv.Unknown(nil), sv.Reclaimable(nil), sv.Physical(nil))
	}
	if err := st.PutSurvey(context.Background(), key.SHA256E, g.Digest, sv, seen); err != nil {
		t.Errorf("a survey with a file gone: %v", err)
	}
	if err := os.WriteFile(a, data, 0o644); err != nil { // written again: a new mtime
		t.Fatal(err)
	}
	sv, seen = SurveyGroup(g)
	if err := st.PutSurvey(context.Background(), key.SHA256E, g.Digest, sv, seen); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a survey of a file written since its record: %v, want ErrConflict", err)
	}
}

// TestCopiesAndMeasure: inodes whose shared extents overlap on one device
// are one copy, named by the first, also through a third inode; the same
// places on another device are not; measure cuts extents at the last
// block and counts neither inline data nor shared bytes as alone.
func TestCopiesAndMeasure(t *testing.T) {
	inodes := make([]store.SurveyInode, 5)
	for i := range inodes {
		inodes[i].Dev = 1
	}
	inodes[4].Dev = 2
	copies(inodes, []placedExtent{
		{dev: 1, physical: 1000, length: 100, inode: 3}, // 3 overlaps 1 …
		{dev: 1, physical: 1050, length: 100, inode: 1},
		{dev: 1, physical: 1140, length: 10, inode: 2},  // … and 2 overlaps 1's end
		{dev: 2, physical: 1000, length: 100, inode: 4}, // the same place on another device
		{dev: 1, physical: 5000, length: 10, inode: 0},
	})
	var got []int
	for _, in := range inodes {
		got = append(got, in.Copy)
	}
	if want := []int{0, 1, 1, 1, 4}; !slices.Equal(got, want) {
		t.Errorf("copies %v, want %v", got, want)
	}
	exts := []extent{
		{logical: 0, physical: 100, length: 4096},
		{logical: 4096, physical: 900, length: 8192, flags: extentShared},
		{logical: 12288, physical: 0, length: 4096, flags: extentDataInline},
		{logical: 16384, physical: 5000, length: 65536}, // past the end: preallocated
	}
	placedBytes, alone, shared := measure(exts, 8192)
	if placedBytes != 8192 || alone != 4096 || len(shared) != 1 || shared[0].length != 4096 {
		t.Errorf("measure: placed %d, alone %d, shared %+v; want 8192, 4096, one of 4096", placedBytes, alone, shared)
	}
}
