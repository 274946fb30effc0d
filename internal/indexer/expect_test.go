package indexer

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/testutil"
)

// liveScan is a running scan with what its walk saw and expects.
func liveScan(files, bytes, hashBytes, settled, expFiles, expBytes int64, from string) *scan {
	sc := &scan{}
	l := &sc.live
	l.files.Store(files)
	l.bytes.Store(bytes)
	l.hashBytes.Store(hashBytes)
	l.settled.Store(settled)
	l.expFiles.Store(expFiles)
	l.expBytes.Store(expBytes)
	l.setFrom(from)
	return sc
}

// early notes a file of size bytes in sc as queued ahead of its walk.
func early(sc *scan, size int64) *scan {
	sc.early.add("/ahead", size, &sc.live)
	return sc
}

// The bytes of files queued ahead of a walk count as ahead of it until it
// meets them, once, and not at all when they were queued already.
func TestEarlyFilesAhead(t *testing.T) {
	sc := &scan{}
	sc.early.add("/a", 100, &sc.live)
	sc.early.add("/b", 20, &sc.live)
	sc.early.add("/a", 100, &sc.live)
	if got := sc.live.ahead.Load(); got != 120 {
		t.Fatalf("ahead %d, want 120", got)
	}
	sc.early.met("/a", &sc.live)
	sc.early.met("/a", &sc.live)
	sc.early.met("/other", &sc.live)
	if got := sc.live.ahead.Load(); got != 20 {
		t.Errorf("after the walk met /a (twice): ahead %d, want 20", got)
	}
	sc.early.drop("/b", &sc.live) // queued already
	sc.early.drop("/a", &sc.live) // met: nothing more to take off
	if got := sc.live.ahead.Load(); got != 0 {
		t.Errorf("after the drops: ahead %d, want 0", got)
	}
	if sc.early.has("/b") || sc.early.has("/a") {
		t.Error("dropped files still noted")
	}
}

// The time left counts what the walks have still to find, in the share of
// it that needs hashing, and is unknown while the tree is being counted.
func TestWalkEstimate(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		name           string
		sc             *scan
		hashed, queued int64 // bytes hashed in the 10 s so far; bytes queued
		want           time.Duration
	}{
		// 1,000 of 4,000 files walked in 10 s, 1 of 4 MiB, all of it to
		// hash; 0.5 MiB hashed, 0.5 MiB queued: 3.5 MiB left at 50 KiB/s.
		{"first scan", liveScan(1000, mb, mb, mb/2, 4000, 4*mb, ExpectCount), mb / 2, mb / 2, 70 * time.Second},
		// A rescan: nothing needed hashing, so the walk is what is left:
		// 3,000 files at 100 files/s.
		{"rescan", liveScan(1000, mb, 0, mb, 4000, 4*mb, ExpectPrevious), mb / 2, 0, 30 * time.Second},
		{"counting", liveScan(1000, mb, mb, mb/2, 1500, mb, ExpectCounting), mb / 2, mb / 2, 0},
		// The first scan, with 1 MiB of files queued ahead of the walk
		// (early) and 0.5 MiB of it hashed: those are in the queue or done,
		// not in what the walk has still to meet: 2.5 MiB left.
		{"first scan, files ahead", early(liveScan(1000, mb, mb, mb/2, 4000, 4*mb, ExpectCount), mb), mb / 2, mb / 2, 50 * time.Second},
	} {
		ws := &walks{running: map[*scan]struct{}{c.sc: {}}, period: []*scan{c.sc}, start: time.Now().Add(-10 * time.Second)}
		w, left := ws.progress(c.hashed, c.queued, nil)
		if w == nil || w.ExpectFrom != c.sc.live.expectFrom() || w.DoneBytes != c.sc.live.settled.Load() {
			t.Errorf("%s: walk %+v", c.name, w)
			continue
		}
		if d := left - c.want; d < -time.Second || d > time.Second {
			t.Errorf("%s: %v left, want about %v", c.name, left, c.want)
		}
	}
	ws := &walks{running: map[*scan]struct{}{}, start: time.Now().Add(-10 * time.Second)}
	if w, left := ws.progress(mb, mb, nil); w != nil || left < 9*time.Second || left > 11*time.Second {
		t.Errorf("no walk running: %+v, %v left, want about 10 s for the queue", w, left)
	}
}

// A complete scan of a root keeps its totals in the store; the next start
// expects them of its first scan.
func TestWalkTotalsKept(t *testing.T) {
	root := t.TempDir()
	var bytes int64
	for i := range 50 {
		c := fmt.Sprint("content ", i)
		writeFile(t, filepath.Join(root, fmt.Sprintf("d%d", i%5), fmt.Sprintf("f%d", i)), c)
		bytes += int64(len(c))
	}
	e := newEnv(t, root, envOpts{noWatch: true})
	e.settle(time.Minute)
	waitFor(t, "the totals in the store", func() bool {
		b, ok, err := e.st.GetMeta(totalsMeta)
		var got map[string]totals
		return err == nil && ok && json.Unmarshal(b, &got) == nil && got[root] == totals{Files: 50, Bytes: bytes}
	})
	e.stop()
	log := new(testutil.Buffer)
	e.start(envOpts{noWatch: true, opts: Options{Logger: slog.New(slog.NewTextHandler(log, nil))}})
	e.settle(time.Minute)
	want := fmt.Sprintf(`expect_files=50 expect_bytes=%d expect_from="previous scan"`, bytes)
	if !strings.Contains(log.String(), want) {
		t.Errorf("the second start's scan does not expect the first one's totals (%s):\n%s", want, log)
	}
}

// Several roots make one piece of work: a root whose walk ended stays in
// the totals, one still to walk counts with its last totals, and the
// totals never fall as walks end; with a root of unknown size still to
// come there is no estimate.
func TestPeriodTotals(t *testing.T) {
	const mb = 1 << 20
	a := liveScan(4000, 4*mb, 4*mb, 2*mb, 4000, 4*mb, ExpectCount)
	b := liveScan(1000, mb, mb, mb/2, 3000, 3*mb, ExpectCount)
	ws := &walks{running: map[*scan]struct{}{a: {}, b: {}}, period: []*scan{a, b}, coming: map[string]int{"/c": 1},
		totals: map[string]totals{"/c": {Files: 2000, Bytes: 2 * mb}}, start: time.Now().Add(-10 * time.Second)}
	w, left := ws.progress(3*mb, mb, nil)
	if w.ExpectFiles != 9000 || w.ExpectBytes != 9*mb || w.Files != 5000 || w.Walking != 2 || left <= 0 {
		t.Fatalf("two walks and a root to come: %+v, %v left", w, left)
	}
	ws.walked(a)
	w2, _ := ws.progress(3*mb, mb, nil)
	if w2.ExpectFiles != w.ExpectFiles || w2.ExpectBytes != w.ExpectBytes || w2.Files != w.Files || w2.Walking != 1 {
		t.Errorf("after one walk ended: %+v; want the same totals as %+v", w2, w)
	}
	w3, left := ws.progress(3*mb, mb, []string{"/new"})
	if w3.ExpectFrom != ExpectCounting || left != 0 {
		t.Errorf("a root of unknown size to come: %+v, %v left; want counting, no estimate", w3, left)
	}
	ws.over(a, false)
	w4, _ := ws.progress(3*mb, mb, nil)
	if w4.ExpectFiles != w.ExpectFiles || w4.Files != w.Files || len(ws.period) != 1 {
		t.Errorf("one scan over, one settling: %+v; want the same totals as %+v", w4, w)
	}
	ws.over(b, true)
	if w5, _ := ws.progress(3*mb, mb, nil); w5 == nil || w5.ExpectFiles != w.ExpectFiles {
		t.Errorf("every scan over, a root still to come: %+v; want the period's totals", w5)
	}
	ws.coming = map[string]int{}
	ws.over(b, false)
	if w6, _ := ws.progress(3*mb, mb, nil); w6 != nil {
		t.Errorf("every scan over and none to come: %+v; want no progress", w6)
	}
	// Too early for an estimate: under 2 % settled.
	c := liveScan(100, mb, mb, mb/100, 4000, 40*mb, ExpectCount)
	ws = &walks{running: map[*scan]struct{}{c: {}}, period: []*scan{c}, start: time.Now().Add(-10 * time.Second)}
	if _, left := ws.progress(mb, mb, nil); left != 0 {
		t.Errorf("1 of 40 MiB settled: %v left claimed", left)
	}
}
