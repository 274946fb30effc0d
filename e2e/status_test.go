package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/loopfs"
)

// The audit's coverage in status is true when asked: it counts the files
// under the roots now, not records left outside them by an earlier run,
// nor what forget dropped, nor an index before its first scan; the plan
// says when the next pass is due; an interval of an hour reads as one.
func TestStatusCoverageTrueWhenAsked(t *testing.T) {
	base := dedupBase(t, auditConf+"every = \"1h\"\n")
	old, root := filepath.Join(base, "old"), filepath.Join(base, "root")
	for i := range 30 {
		writeAged(t, filepath.Join(old, fmt.Sprintf("o%02d", i)), uint64(100+i), 4<<10)
	}
	d := startOn(t, base, old)
	d.stop()

	for i := range 12 {
		writeAged(t, filepath.Join(root, fmt.Sprintf("n%02d", i)), uint64(i+1), 4<<10)
	}
	d = startOn(t, base, root)
	cov := func(what string) {
		t.Helper()
		st := auditStatus(t, d)
		if st.Coverage.Total != 12 || st.Coverage.Files != 12 {
			t.Errorf("%s: coverage %d of %d files; want 12 of 12, the files under the root", what, st.Coverage.Files, st.Coverage.Total)
		}
		if st.State != "idle" || !strings.HasPrefix(st.Reason, "the next pass is due in ") {
			t.Errorf("%s: %s (%s); want idle until the next pass, with when", what, st.State, st.Reason)
		}
		if st.NextRun.Before(time.Now().Add(50*time.Minute)) || st.NextRun.After(time.Now().Add(time.Hour)) {
			t.Errorf("%s: next run %v, want in about an hour", what, st.NextRun)
		}
	}
	cov("right after the first scan of the root")
	r := d.ctl("", "audit", "status")
	if !strings.Contains(r.stdout, "12 of 12 files verified in the last hour (100 %)\n") ||
		!regexp.MustCompile(`audit: +idle: the next pass is due in (59m|1h0m)\n`).MatchString(r.stdout) {
		t.Errorf("audit status:\n%s", r.stdout)
	}
	if r := d.ctl("", "forget", old); r.code != 0 {
		t.Fatalf("forget: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	cov("after forget")
}

// What holds background work back is said as it is now: status never
// says the background deduplication or an audit run waits for a busy
// machine that is busy no longer (they look at their gates only every
// 30 s and 5 s), and the ones it held go on at once.
func TestStatusSaysWhatHoldsWorkNow(t *testing.T) {
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	root := fs.Path("home")
	for _, p := range []string{"x/a.bin", "y/b.bin"} {
		writeRandom(t, filepath.Join(root, p), 7, 1<<20)
	}
	writeAged(t, filepath.Join(root, "z/c.bin"), 3, 64<<10)
	m := newMachine(t, 50)
	conf := "[dedup]\ncontinuous = true\nquiet = \"1s\"\ninterval = \"200ms\"\nignore_battery = true\n" +
		"[audit]\nignore_battery = true\n"
	base := dedupBase(t, conf)
	d := spawn(t, annexdRun{base: base, roots: []string{root}, wrap: m.wrapNoPressure(), env: m.env})
	d.waitIdle()
	deadline := time.Now().Add(time.Minute)
	for dedupStatus(t, d).Paused == "" {
		if time.Now().After(deadline) {
			t.Fatalf("the background mode never paused under a load of 50\n%s", d.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := d.ctl("", "audit", "run"); r.code != 0 {
		t.Fatalf("audit run: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	for deadline = time.Now().Add(time.Minute); auditStatus(t, d).State != "waiting"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the audit run never waited under a load of 50\n%s", d.log)
		}
	}
	m.setLoad(t, 0.1)
	if p := dedupStatus(t, d).Paused; p != "" {
		t.Errorf("the load is gone, and status says the background mode is paused: %q", p)
	}
	if st := auditStatus(t, d); st.State == "waiting" {
		t.Errorf("the load is gone, and status says the audit run waits: %q", st.Reason)
	}
	for deadline = time.Now().Add(10 * time.Second); dedupStatus(t, d).Pairs < 1; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the background mode did not go on within 10 s of the load's end (it looks every 30 s)\n%s", d.log)
		}
	}
}
