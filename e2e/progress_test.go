package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
)

// The progress of a first scan while its walk runs: the daemon knows what
// the walk will find (from a counting walk beside it), the share done never
// goes back nor reaches 100 % before the walk ends, and no time left is
// claimed while the tree is still being counted; the next start expects
// what this scan saw.
func TestProgressDuringFirstScan(t *testing.T) {
	t.Parallel()
	const n, big = 30000, 4
	base := newBase(t)
	root := filepath.Join(base, "root")
	var total int64
	for i := range n {
		c := fmt.Sprintf("small file %d", i)
		write(t, filepath.Join(root, fmt.Sprintf("d%03d", i%150), fmt.Sprintf("f%05d.txt", i)), c)
		total += int64(len(c))
	}
	for i := range big {
		c := strings.Repeat(fmt.Sprint(i), 2<<20)
		write(t, filepath.Join(root, fmt.Sprintf("d%03d", i*37), fmt.Sprintf("big%d.bin", i)), c)
		total += int64(len(c))
	}
	l := annexdRun{base: base, roots: []string{root}, extra: []string{"--hash-workers", "1"}}
	d := spawn(t, l)

	var walking []api.Status
	sawText := false
	c := api.Dial(d.socket)
	defer c.Close()
	for deadline := time.Now().Add(3 * time.Minute); ; {
		st, ok := sampleStatus(t, d, c)
		if ok {
			if st.Idle {
				break
			}
			if st.Scan.Walk != nil {
				walking = append(walking, st)
				if !sawText {
					txt := d.ctl("", "status")
					sawText = strings.Contains(txt.stdout, "walking:")
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not idle within 3 minutes:\n%s", d.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(walking) < 3 {
		t.Fatalf("%d status answers showed the walk running; the daemon does not say a walk runs", len(walking))
	}
	if !sawText {
		t.Error("annexctl status does not show the walk running")
	}
	counted, last := false, -1.0
	for i, st := range walking {
		w := st.Scan.Walk
		switch w.ExpectFrom {
		case "counting":
			if st.Scan.EstimateSeconds != 0 {
				t.Errorf("sample %d: %.0f s left claimed while the tree is still counted: %+v", i, st.Scan.EstimateSeconds, w)
			}
		case "count":
			counted = true
			if w.ExpectFiles != n+big || w.ExpectBytes != total {
				t.Errorf("sample %d: counted %d files, %d bytes; the tree has %d, %d", i, w.ExpectFiles, w.ExpectBytes, n+big, total)
			}
			frac := float64(w.DoneBytes) / float64(max(w.ExpectBytes, w.Bytes))
			if frac > 1 || (frac == 1 && w.Files < w.ExpectFiles) || frac < last-0.01 {
				t.Errorf("sample %d: %.1f %% done after %.1f %%, while the walk runs (%+v)", i, 100*frac, 100*last, w)
			}
			last = frac
		default:
			t.Errorf("sample %d: expected totals from %q", i, w.ExpectFrom)
		}
	}
	if !counted {
		t.Errorf("the count of the tree never finished before its walk (%d samples)", len(walking))
	}
	d.stop()

	// The next start expects what this scan saw.
	again := spawn(t, l)
	again.waitIdle()
	want := fmt.Sprintf(`expect_files=%d expect_bytes=%d expect_from="previous scan"`, n+big, total)
	if !strings.Contains(again.log.String(), want) {
		t.Errorf("the second scan does not expect the first one's totals (%s):\n%s", want, again.log)
	}
}

// A first scan of several roots, walked two at a time, is one piece of
// work in status: the files seen and the share done never go back, the
// expected total, once every root is counted, is the trees' and stays
// so, no time left is claimed while a root's size is unknown, and what is
// claimed is not far off the time it took.
func TestProgressSeveralRoots(t *testing.T) {
	const roots, n, big = 3, 6000, 2
	base := newBase(t)
	var dirs []string
	for r := range roots {
		root := filepath.Join(base, fmt.Sprintf("root%d", r))
		for i := range n + r*1000 {
			write(t, filepath.Join(root, fmt.Sprintf("d%03d", i%100), fmt.Sprintf("f%05d.txt", i)), fmt.Sprintf("file %d of %d", i, r))
		}
		for i := range big {
			write(t, filepath.Join(root, fmt.Sprintf("big%d.bin", i)), strings.Repeat(fmt.Sprint(r, i), 1<<20))
		}
		dirs = append(dirs, root)
	}
	files := int64(roots*(n+big) + 1000 + 2000)
	d := spawn(t, annexdRun{base: base, roots: dirs, extra: []string{"--hash-workers", "1"}})
	type sample struct {
		at time.Time
		st api.Status
	}
	var samples []sample
	var idleAt time.Time
	c := api.Dial(d.socket)
	defer c.Close()
	for deadline := time.Now().Add(3 * time.Minute); ; {
		if st, ok := sampleStatus(t, d, c); ok && st.Starting == "" {
			if st.Idle {
				idleAt = time.Now()
				break
			}
			samples = append(samples, sample{time.Now(), st})
		}
		if time.Now().After(deadline) {
			t.Fatalf("not idle within 3 minutes:\n%s", d.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(samples) < 5 {
		t.Fatalf("only %d samples of the scan", len(samples))
	}
	var lastFiles int64
	lastFrac, total := -1.0, int64(0)
	for i, s := range samples {
		w := s.st.Scan.Walk
		if w == nil {
			continue
		}
		if w.Files < lastFiles {
			t.Errorf("sample %d: %d files seen after %d", i, w.Files, lastFiles)
		}
		lastFiles = w.Files
		if w.ExpectFrom == "counting" {
			if s.st.Scan.EstimateSeconds != 0 {
				t.Errorf("sample %d: %.0f s left claimed while a root's size is unknown", i, s.st.Scan.EstimateSeconds)
			}
			continue
		}
		if total == 0 {
			total = w.ExpectFiles
		}
		if w.ExpectFiles != files || w.ExpectFiles != total {
			t.Errorf("sample %d: %d files expected, after %d; the trees hold %d (%+v)", i, w.ExpectFiles, total, files, w)
		}
		frac := float64(w.DoneBytes) / float64(max(w.ExpectBytes, w.Bytes))
		if frac < lastFrac-0.01 {
			t.Errorf("sample %d: %.1f %% done after %.1f %%", i, 100*frac, 100*lastFrac)
		}
		lastFrac = frac
		if e := s.st.Scan.EstimateSeconds; e > 0 {
			if took := idleAt.Sub(s.at).Seconds(); e > 10*took+20 {
				t.Errorf("sample %d: %.0f s left claimed; it took %.1f s", i, e, took)
			}
		}
	}
	if total == 0 {
		t.Errorf("the roots were never all counted (%d samples)", len(samples))
	}
	estimated := 0
	for _, s := range samples {
		if s.st.Scan.EstimateSeconds > 0 {
			estimated++
		}
	}
	t.Logf("%d samples over %v, %d with an estimate", len(samples), idleAt.Sub(samples[0].at).Round(time.Millisecond), estimated)
}

// sampleStatus is one sample of a scan's status, and false while the
// daemon does not answer yet. Most samples come through the API client
// annexctl uses, in this process: a start of annexctl for each sample,
// every 20 ms, cost more CPU than the scan under test. Every tenth is
// annexctl status --json, so the command's output is sampled too.
func sampleStatus(t *testing.T, d *daemon, c *api.Client) (api.Status, bool) {
	t.Helper()
	var st api.Status
	if d.samples++; d.samples%10 == 1 {
		r := d.ctl("", "status", "--json")
		return st, r.code == 0 && json.Unmarshal([]byte(r.stdout), &st) == nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ctlTimeout)
	defer cancel()
	st, err := c.Status(ctx)
	return st, err == nil
}
