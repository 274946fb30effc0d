package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/loopfs"
)

// The tests of dups' figures run the real daemon and annexctl on roots in
// loop-mounted images, where blocks can be shared.

// dupsGroup is a group of dups --json.
type dupsGroup struct {
	Size        int64  `json:"size"`
	Count       int    `json:"count"`
	Copies      int    `json:"copies"`
	Physical    int    `json:"physical"`
	Duplicate   int64  `json:"duplicate_bytes"`
	Reclaimable int64  `json:"reclaimable"`
	SurveyedAt  string `json:"surveyed_at"`
	Files       []struct {
		Path       string `json:"path"`
		LinkOf     string `json:"link_of"`
		SharesWith string `json:"shares_with"`
	} `json:"files"`
}

// dupsJSON runs dups --json with args and returns its groups.
func dupsJSON(t *testing.T, d *daemon, args ...string) []dupsGroup {
	t.Helper()
	r := d.ctl("", append([]string{"dups", "--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("dups --json %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	var out []dupsGroup
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if line == "" {
			continue
		}
		var g dupsGroup
		if err := json.Unmarshal([]byte(line), &g); err != nil {
			t.Fatalf("dups --json line %q: %v", line, err)
		}
		out = append(out, g)
	}
	return out
}

// waitMetric waits until the metric has the value want (the daemon keeps
// surveys in its index in the background of a listing or a run).
func waitMetric(t *testing.T, d *daemon, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for metric(t, d, name) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, want %v:\n%s", name, metric(t, d, name), want, metricsText(t, d))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// On XFS and btrfs, 10 groups of 3 copies of 1 MiB, each copy written
// on its own: dups calls 20 MiB reclaimable, and so does the metric.
// After dedup gave those bytes back (statfs agrees), dups calls nothing
// reclaimable and shows each group as one physical copy whose later
// copies share the first one's blocks; the metric agrees; whereis marks
// the shared copies; dups PATH lists the groups with a file there.
func TestDupsReclaimable(t *testing.T) {
	t.Parallel()
	for _, kind := range []loopfs.Kind{loopfs.XFS, loopfs.Btrfs} {
		t.Run(string(kind), func(t *testing.T) { testDupsReclaimable(t, kind) })
	}
}

func testDupsReclaimable(t *testing.T, kind loopfs.Kind) {
	const (
		groups = 10
		size   = 1 << 20
		total  = groups * 2 * size
	)
	fs := loopfs.New(t, kind, loopfs.Options{Size: loopfs.MinSize[kind] + 128<<20})
	root := fs.Path("home")
	for g := range groups {
		for _, dir := range []string{"a", "b", "c"} {
			writeRandom(t, filepath.Join(root, dir, fmt.Sprintf("g%d.bin", g)), uint64(100+g), size)
		}
	}
	d := startOn(t, dedupBase(t, ""), root)

	before := dupsJSON(t, d)
	if len(before) != groups {
		t.Fatalf("dups lists %d groups, want %d", len(before), groups)
	}
	for _, g := range before {
		if g.Copies != 3 || g.Physical != 3 || g.Duplicate != 2*size || g.Reclaimable != 2*size || g.SurveyedAt == "" {
			t.Errorf("before dedup: %d copies, %d physical, %d duplicate, %d reclaimable (surveyed %q); want 3, 3, 2 MiB, 2 MiB",
				g.Copies, g.Physical, g.Duplicate, g.Reclaimable, g.SurveyedAt)
		}
	}
	if r := d.ctl("", "dups"); !strings.HasSuffix(r.stdout, "\n10 groups, 20.0 MiB reclaimable of 20.0 MiB in extra copies\n") ||
		!strings.Contains(r.stdout, "\n3 copies × 1.0 MiB, 2.0 MiB reclaimable  SHA256E-s1048576--") {
		t.Errorf("dups before dedup: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	waitMetric(t, d, "annexd_index_reclaimable_bytes", total)
	waitMetric(t, d, "annexd_index_unsurveyed_duplicate_bytes", 0)

	free := fs.Free(t)
	if r := d.ctl("", "dedup"); r.code != 0 || !strings.Contains(r.stdout, "freed 20.0 MiB in 20 of 20 files") {
		t.Fatalf("dedup: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	gained := fs.Free(t) - free
	if gained < total*99/100 || gained > total*101/100 {
		t.Errorf("statfs gained %d bytes; dups called %d reclaimable", gained, total)
	}

	after := dupsJSON(t, d)
	if len(after) != groups {
		t.Fatalf("after dedup, dups lists %d groups, want %d", len(after), groups)
	}
	for _, g := range after {
		if g.Copies != 3 || g.Physical != 1 || g.Duplicate != 2*size || g.Reclaimable != 0 {
			t.Errorf("after dedup: %d copies, %d physical, %d duplicate, %d reclaimable; want 3, 1, 2 MiB, 0",
				g.Copies, g.Physical, g.Duplicate, g.Reclaimable)
		}
		first := g.Files[0].Path
		if g.Files[0].SharesWith != "" || g.Files[1].SharesWith != first || g.Files[2].SharesWith != first {
			t.Errorf("after dedup, shares_with %q, %q, %q; want none, then %s twice",
				g.Files[0].SharesWith, g.Files[1].SharesWith, g.Files[2].SharesWith, first)
		}
	}
	r := d.ctl("", "dups")
	if !strings.HasSuffix(r.stdout, "\n10 groups, 0 B reclaimable of 20.0 MiB in extra copies\n") ||
		!strings.Contains(r.stdout, "\n3 copies (1 physical) × 1.0 MiB, 0 B reclaimable  SHA256E-s1048576--") ||
		!strings.Contains(r.stdout, "/b/g3.bin  [shares blocks with "+filepath.Join(root, "a/g3.bin")+"]\n") {
		t.Errorf("dups after dedup: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	waitMetric(t, d, "annexd_index_reclaimable_bytes", 0)
	waitMetric(t, d, "annexd_index_unsurveyed_duplicate_bytes", 0)
	if v := metric(t, d, "annexd_index_duplicate_bytes"); v != total {
		t.Errorf("annexd_index_duplicate_bytes %v, want %d", v, total)
	}

	a3, c3 := filepath.Join(root, "a/g3.bin"), filepath.Join(root, "c/g3.bin")
	r = d.ctl("", "whereis", c3)
	if r.code != 0 || !strings.Contains(r.stderr, "annexctl: "+c3+": shares its blocks with "+a3+" (one physical copy)\n") ||
		strings.Count(r.stdout, "\n") != 3 {
		t.Errorf("whereis %s: exit %d\n%s%s", c3, r.code, r.stdout, r.stderr)
	}

	// dups PATH: the groups with a file at or below PATH, whole.
	one := dupsJSON(t, d, c3)
	if len(one) != 1 || len(one[0].Files) != 3 || one[0].Files[0].Path != a3 {
		t.Errorf("dups %s: %+v, want its group of 3", c3, one)
	}
	if got := dupsJSON(t, d, filepath.Join(root, "b"), "--limit", "4"); len(got) != 4 {
		t.Errorf("dups b --limit 4: %d groups", len(got))
	}
	rel := d.ctlIn(filepath.Join(root, "c"), "", "dups", "--json", "g3.bin")
	if rel.code != 0 || strings.Count(rel.stdout, "\n") != 1 || !strings.Contains(rel.stdout, `"path":"`+a3+`"`) {
		t.Errorf("dups g3.bin from %s/c: exit %d\n%s%s", root, rel.code, rel.stdout, rel.stderr)
	}
	if r := d.ctl("", "dups", "/etc"); r.code != 2 || !strings.Contains(r.stderr, "/etc is not under") {
		t.Errorf("dups /etc: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := d.ctl("", "dups", ""); r.code != 2 {
		t.Errorf("dups '': exit %d\n%s", r.code, r.stderr)
	}
}

// Hard links count once, holes count nothing: 1 MiB with two names and a
// copy reclaim 1 MiB, not 2; two sparse copies of 1 MiB holding 64 KiB
// of data each reclaim those 64 KiB.
func TestDupsHardLinksAndHoles(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: loopfs.MinSize[loopfs.XFS]})
	root := fs.Path("home")
	const size = 1 << 20
	x, x2, y := filepath.Join(root, "links/x"), filepath.Join(root, "links/x2"), filepath.Join(root, "links/y")
	writeRandom(t, x, 7, size)
	writeRandom(t, y, 7, size)
	if err := os.Link(x, x2); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"holes/s1", "holes/s2"} {
		writeRandom(t, filepath.Join(root, p), 8, 64<<10)
		if err := os.Truncate(filepath.Join(root, p), size); err != nil {
			t.Fatal(err)
		}
	}
	d := startOn(t, dedupBase(t, ""), root)

	links := dupsJSON(t, d, filepath.Join(root, "links"))
	if len(links) != 1 || links[0].Count != 3 || links[0].Copies != 2 || links[0].Physical != 2 ||
		links[0].Duplicate != size || links[0].Reclaimable != size {
		t.Errorf("hard-linked group: %+v; want 3 names, 2 copies, 1 MiB duplicate and reclaimable", links)
	}
	holes := dupsJSON(t, d, filepath.Join(root, "holes"))
	if len(holes) != 1 || holes[0].Copies != 2 || holes[0].Duplicate != size || holes[0].Reclaimable != 64<<10 {
		t.Errorf("sparse group: %+v; want 2 copies, 1 MiB duplicate, 64 KiB reclaimable", holes)
	}
	if r := d.ctl("", "dups", "--bytes", filepath.Join(root, "holes")); !strings.Contains(r.stdout, "2 copies × 1048576 B, 65536 B reclaimable") {
		t.Errorf("dups --bytes holes:\n%s%s", r.stdout, r.stderr)
	}
	waitMetric(t, d, "annexd_index_reclaimable_bytes", size+64<<10)
}
