package dedup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/internal/testutil"
	"github.com/annexd/annexd/store"
)

// backend is one way of deduplicating on one kind of file system.
type backend struct {
	mode Mode
	kind loopfs.Kind
}

// shares reports whether the backend can deduplicate at all: ext4 has no
// shared extents, so reflink mode must refuse there.
func (b backend) shares() bool { return b.mode == Hardlink || b.kind != loopfs.Ext4 }

// TestConformance runs the one suite against every mode on every file
// system: the same promises hold everywhere, or the run refuses and says
// why.
func TestConformance(t *testing.T) {
	for _, mode := range []Mode{Reflink, Hardlink} {
		for _, kind := range loopfs.Kinds {
			b := backend{mode, kind}
			t.Run(mode.String()+"/"+string(kind), func(t *testing.T) {
				t.Parallel() // one file system each: nothing shared
				t.Run("deduplicates", func(t *testing.T) { testDeduplicates(t, b) })
				t.Run("dry run", func(t *testing.T) { testDryRun(t, b) })
				t.Run("modified after the plan", func(t *testing.T) { testModified(t, b) })
				t.Run("symlink swapped in", func(t *testing.T) { testSymlinkSwap(t, b) })
				t.Run("open for writing", func(t *testing.T) { testOpenForWriting(t, b) })
			})
		}
	}
}

// TestHardlinkKilled kills hard-link runs at random moments on each file
// system, one after the other: its children count the steps they reach,
// which another suite's load beside them must not cut short. Each file
// system also has a run killed after each step; the random kills are 2
// (8 in .ci/run).
func TestHardlinkKilled(t *testing.T) {
	for _, kind := range loopfs.Kinds {
		t.Run(string(kind), func(t *testing.T) { testKilled(t, backend{Hardlink, kind}, testutil.Runs(2, 8)) })
	}
}

// env is one test's file system, index and Deduper.
type env struct {
	b      backend
	fs     *loopfs.FS
	st     *store.Store
	d      *Deduper
	ledger *fakeLedger
	files  map[string][]byte // name under fs.Dir → content
}

// tree is the suite's set of files: duplicates by bare digest across
// extensions, a big file (bigSize), small files, an inode with two names,
// and files without duplicates.
func tree(mode Mode) map[string][]byte {
	photo, big, small, doc := content(21, 1<<20+4321), content(22, bigSize(mode)), content(23, 300), content(24, 70_000)
	return map[string][]byte{
		"photos/a.JPG":       photo,
		"backup/a.jpg":       photo,
		"backup/old/a.jpeg":  photo,
		"video/big":          big,
		"video/big.copy":     big,
		"notes/s1":           small,
		"notes/s2":           small,
		"docs/d":             doc,
		"links/d1":           doc, // with links/d2, one inode
		"unique/u1":          content(25, 5000),
		"unique/u2":          content(26, 5000),
		"photos/empty":       nil,
		"backup/empty.again": nil,
	}
}

func newEnv(t *testing.T, b backend) *env {
	t.Helper()
	e := &env{b: b, fs: loopfs.New(t, b.kind, loopfs.Options{Size: 320 << 20}), st: openStore(t), ledger: &fakeLedger{}, files: tree(b.mode)}
	for name, data := range e.files {
		writeFile(t, e.fs.Path(name), data)
	}
	for _, keeper := range []string{"photos/a.JPG", "video/big", "notes/s1"} {
		must(t, os.Chtimes(e.fs.Path(keeper), aLongTimeAgo, aLongTimeAgo))
	}
	must(t, os.Link(e.fs.Path("links/d1"), e.fs.Path("links/d2")))
	e.files["links/d2"] = e.files["links/d1"]
	for name := range e.files {
		record(t, e.st, e.fs.Path(name))
	}
	e.d = New(e.st, Options{Ledger: e.ledger, Intents: NewMetaIntents(e.st),
		Indexer: rehashFunc(func(p string) { record(t, e.st, p) })})
	return e
}

func (e *env) req(paths ...string) Request {
	r := Request{PlanOptions: PlanOptions{Mode: e.b.mode}}
	for _, p := range paths {
		r.Paths = append(r.Paths, []byte(e.fs.Path(p)))
	}
	return r
}

// snapshot is what the suite compares before and after: each name's stat
// identity and extent map.
type snapshot map[string]struct {
	id      statID
	extents []extent
}

func (e *env) snapshot(t *testing.T) snapshot {
	t.Helper()
	s := snapshot{}
	for name := range e.files {
		v := s[name]
		v.id = idOf(lstat(t, e.fs.Path(name)))
		v.extents = extentsOf(t, e.fs.Path(name))
		s[name] = v
	}
	return s
}

// assertContents fails unless every name holds its content.
func (e *env) assertContents(t *testing.T) {
	t.Helper()
	for name, data := range e.files {
		assertContent(t, e.fs.Path(name), data)
	}
	assertNoTemp(t, e.fs.Dir)
}

// assertIndexAgrees fails unless every record matches its file's stat and
// the digest of its content, and the index passes its checks.
func (e *env) assertIndexAgrees(t *testing.T) {
	t.Helper()
	abs := map[string][]byte{}
	for name, data := range e.files {
		abs[e.fs.Path(name)] = data
	}
	assertIndexAgrees(t, e.st, abs)
}

// assertIndexAgrees checks the records of files (absolute path → content).
func assertIndexAgrees(t *testing.T, st *store.Store, files map[string][]byte) {
	t.Helper()
	for p, data := range files {
		r, ok, err := st.Get([]byte(p))
		if err != nil || !ok {
			t.Errorf("%s: no record (%v)", p, err)
			continue
		}
		sum := sha256.Sum256(data)
		if !matches(lstat(t, p), &r) || !bytes.Equal(r.Digest, sum[:]) || r.State != store.StateOK {
			t.Errorf("%s: the record does not describe the file", p)
		}
	}
	if rep, err := st.Check(); err != nil || !rep.OK() {
		t.Errorf("index check: %v %v", err, rep.Problems)
	}
}

// bigSize is the size of tree's big file: in reflink mode larger than one
// FIDEDUPERANGE call (dedupeChunk), in hardlink mode larger than two steps
// of its comparison (sameBytes reads 1 MiB at a time). Hardlink mode does
// nothing in 16 MiB pieces, and the bytes cost CPU in every test of it.
func bigSize(mode Mode) int {
	if mode == Hardlink {
		return 2<<20 + 99_999
	}
	return dedupeChunk + 99_999
}

// The duplicates of tree(): target names, and the bytes they hold.
var treeTargets = []string{"backup/a.jpg", "backup/old/a.jpeg", "video/big.copy", "notes/s2", "docs/d"}

func treeDups(mode Mode) int64 { return int64(2*(1<<20+4321) + bigSize(mode) + 300 + 70_000) }

func testDeduplicates(t *testing.T, b backend) {
	e := newEnv(t, b)
	before := e.snapshot(t)
	free := e.fs.Free(t)
	plan, res, err := runDedup(t, e.d, e.req())
	e.assertContents(t)
	if !b.shares() {
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), string(b.kind)) || !strings.Contains(err.Error(), "--hardlink") {
			t.Errorf("Apply: %v, want an error naming %s and --hardlink", err, b.kind)
		}
		if res.Done != 0 || !snapshotsEqual(before, e.snapshot(t)) {
			t.Errorf("done %d, something changed on %s", res.Done, b.kind)
		}
		return
	}
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	wantDone := len(treeTargets)
	if b.mode == Reflink && b.kind == loopfs.Btrfs {
		wantDone-- // notes/s2 is inline in btrfs's metadata: nothing to free
		if plan.NoBlocks != 1 {
			t.Errorf("plan found %d targets without blocks, want notes/s2", plan.NoBlocks)
		}
	}
	if res.Done != wantDone || len(res.Skips) != 0 {
		t.Fatalf("done %d, skips %v; want %d done", res.Done, res.Skips, wantDone)
	}
	gained := e.fs.Free(t) - free
	dups := treeDups(b.mode)
	t.Logf("freed %d bytes (statfs: %d) of %d duplicate bytes", res.Freed, gained, dups)
	if res.Freed < dups-int64(300) || gained < res.Freed*9/10 {
		t.Errorf("freed %d, statfs gained %d; want at least the %d duplicate bytes", res.Freed, gained, dups)
	}
	after := e.snapshot(t)
	for name := range e.files {
		switch {
		case b.mode == Reflink && before[name].id != after[name].id:
			t.Errorf("%s: stat %+v, was %+v", name, after[name].id, before[name].id)
		case b.mode == Hardlink && slices.Contains(treeTargets, name):
			if keeper := keeperOf(t, plan, e.fs.Path(name)); after[name].id.Ino != lstat(t, keeper).Ino {
				t.Errorf("%s is not a link to %s", name, keeper)
			}
		case b.mode == Hardlink && before[name].id.Ino != after[name].id.Ino:
			t.Errorf("%s: inode %d, was %d", name, after[name].id.Ino, before[name].id.Ino)
		}
	}
	if b.mode == Reflink {
		for _, g := range plan.Groups {
			for _, a := range g.Actions {
				if !sharesAll(t, string(a.Targets[0].Path), string(g.Keeper.Path)) {
					t.Errorf("%s does not share %s's extents", a.Targets[0].Path, g.Keeper.Path)
				}
			}
		}
	}
	e.assertIndexAgrees(t)
	again, res2, err := runDedup(t, e.d, e.req())
	if err != nil || again.Actions != 0 || res2.Done != 0 {
		t.Errorf("second run: %d actions, %d done, %v; want nothing to do", again.Actions, res2.Done, err)
	}
	if !snapshotsEqual(after, e.snapshot(t)) {
		t.Error("the second run changed something")
	}
}

// keeperOf returns the keeper the plan chose for a target path.
func keeperOf(t *testing.T, plan Plan, target string) string {
	t.Helper()
	for _, g := range plan.Groups {
		for _, a := range g.Actions {
			for _, tg := range a.Targets {
				if string(tg.Path) == target {
					return string(g.Keeper.Path)
				}
			}
		}
	}
	t.Fatalf("%s is not in the plan", target)
	return ""
}

// snapshotDiff names what differs between a and b: each name's stat
// identity and extents, before and after.
func snapshotDiff(a, b snapshot) string {
	var out []string
	for name, v := range a {
		if w, ok := b[name]; !ok || v.id != w.id || !slices.Equal(v.extents, w.extents) {
			out = append(out, fmt.Sprintf("%s: %+v %+v, now %+v %+v", name, v.id, v.extents, w.id, w.extents))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

func snapshotsEqual(a, b snapshot) bool {
	for name, v := range a {
		if w := b[name]; v.id != w.id || !slices.Equal(v.extents, w.extents) {
			return false
		}
	}
	return len(a) == len(b)
}

func testDryRun(t *testing.T, b backend) {
	e := newEnv(t, b)
	before, free := e.snapshot(t), e.fs.Free(t)
	plan, err := e.d.Plan(context.Background(), e.req())
	if err != nil {
		t.Fatal(err)
	}
	if dups := treeDups(b.mode); b.shares() && (plan.Actions < len(treeTargets)-1 || plan.Frees < dups-300) {
		t.Errorf("the dry run plans %d actions freeing %d, want %d freeing %d", plan.Actions, plan.Frees, len(treeTargets), dups)
	}
	if !b.shares() && len(plan.Unsupported) != 1 {
		t.Errorf("the dry run does not say %s cannot share extents: %v", b.kind, plan.Unsupported)
	}
	if !snapshotsEqual(before, e.snapshot(t)) || e.fs.Free(t) != free {
		t.Error("the dry run changed something")
	}
	e.assertContents(t)
}

func testModified(t *testing.T, b backend) {
	e := newEnv(t, b)
	plan, err := e.d.Plan(context.Background(), e.req("photos", "backup"))
	if err != nil {
		t.Fatal(err)
	}
	changed := content(27, 1<<20+4321)
	writeFile(t, e.fs.Path("backup/a.jpg"), changed)
	e.files["backup/a.jpg"] = changed
	res, err := e.d.Apply(context.Background(), plan, e.req("photos", "backup"))
	e.assertContents(t)
	if !b.shares() {
		return
	}
	if err != nil || res.Done != 1 || res.Skipped[SkipChanged] != 1 {
		t.Errorf("done %d, skipped %v, %v; want backup/old/a.jpeg done, backup/a.jpg left alone", res.Done, res.Skipped, err)
	}
}

// testSymlinkSwap swaps a symlink into a target's directory after the plan
// and another over a target's name. Neither is followed: the files they
// point to, and the moved originals, stay as they were.
func testSymlinkSwap(t *testing.T, b backend) {
	e := newEnv(t, b)
	writeFile(t, e.fs.Path("decoy/a.jpg"), e.files["photos/a.JPG"])
	writeFile(t, e.fs.Path("decoy/big.copy"), e.files["video/big"])
	e.files["decoy/a.jpg"], e.files["decoy/big.copy"] = e.files["photos/a.JPG"], e.files["video/big"]
	plan, err := e.d.Plan(context.Background(), e.req("photos", "backup", "video"))
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.Rename(e.fs.Path("backup"), e.fs.Path("backup.moved")))
	must(t, os.Symlink(e.fs.Path("decoy"), e.fs.Path("backup")))
	must(t, os.Rename(e.fs.Path("video/big.copy"), e.fs.Path("video/big.copy.moved")))
	must(t, os.Symlink(e.fs.Path("decoy/big.copy"), e.fs.Path("video/big.copy")))
	now := map[string][]byte{"backup/a.jpg": e.files["decoy/a.jpg"], "video/big.copy": e.files["decoy/big.copy"]}
	for n, data := range e.files {
		switch {
		case strings.HasPrefix(n, "backup/"):
			n = "backup.moved/" + strings.TrimPrefix(n, "backup/")
		case n == "video/big.copy":
			n = "video/big.copy.moved"
		}
		now[n] = data
	}
	e.files = now
	before := e.snapshot(t)
	res, err := e.d.Apply(context.Background(), plan, e.req("photos", "backup", "video"))
	if b.shares() && (err != nil || res.Done != 0 || res.Skipped[SkipSymlink] != 3) {
		t.Errorf("done %d, skipped %v, %v; want the 3 targets skipped for a symlink", res.Done, res.Skipped, err)
	}
	if after := e.snapshot(t); !snapshotsEqual(before, after) {
		t.Errorf("a file behind a swapped-in symlink, or a moved original, changed: %s", snapshotDiff(before, after))
	}
	e.assertContents(t)
}

// testOpenForWriting: hardlink mode refuses a target someone holds open
// for writing; reflink mode goes ahead, since the kernel compares and
// shares under its own locks and the file stays the same inode.
func testOpenForWriting(t *testing.T, b backend) {
	e := newEnv(t, b)
	holdOpen(t, e.fs.Path("docs/d"))
	_, res, err := runDedup(t, e.d, e.req("docs", "links"))
	e.assertContents(t)
	switch {
	case !b.shares():
	case b.mode == Hardlink && (err != nil || res.Done != 0 || res.Skipped[SkipOpen] != 1):
		t.Errorf("done %d, skipped %v, %v; want docs/d refused as open for writing", res.Done, res.Skipped, err)
	case b.mode == Reflink && (err != nil || res.Done != 1):
		t.Errorf("done %d, skipped %v, %v; want docs/d done", res.Done, res.Skipped, err)
	}
}
