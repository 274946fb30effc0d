package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/loopfs"
)

// rottenTree writes n files of 8 KiB on an ext4 image under home, and
// flips a byte in the first rotten of them behind the file system's back.
func rottenTree(t *testing.T, n, rotten int) (fs *loopfs.FS, root string, bad []string) {
	t.Helper()
	fs = loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root = fs.Path("home")
	var all []string
	for i := range n {
		p := filepath.Join(root, fmt.Sprintf("d%d", i%3), fmt.Sprintf("f%02d.bin", i))
		writeAged(t, p, uint64(i+1), 8<<10)
		all = append(all, p)
	}
	return fs, root, all[:rotten]
}

// A pass counts each file once: runs asked for by hand over flagged files,
// while the pass is stopped half-way, do not count them in it again, and
// the pass ends with as many files as it holds and each rotten file once.
func TestAuditPassCountsEachFileOnce(t *testing.T) {
	const n, rotten = 30, 5
	fs, root, bad := rottenTree(t, n, rotten)
	// 64 KiB/s: a second of the first run reads about eight files.
	d := startOn(t, dedupBase(t, auditConf+"max_rate = \"64KiB\"\n"), root)
	fs.Sync(t)
	for _, p := range bad {
		fs.FlipByte(t, p, 100)
	}
	if code, run := auditRun(t, d, "--time-limit", "1s"); code != 101 && code != 4 || run.StoppedBy != api.AuditTimeLimit {
		t.Fatalf("the first run: exit %d, %+v\n%s", code, run, d.log)
	}
	if st := auditStatus(t, d); st.Pass == nil {
		t.Fatalf("no pass in progress after a run stopped by its time limit: %+v", st)
	}
	for range 2 {
		if code, run := auditRun(t, d, bad...); code != 4 || run.Counts["corrupt"] != rotten {
			t.Fatalf("a run over the rotten files: exit %d, %+v", code, run)
		}
	}
	if st := auditStatus(t, d); st.Pass == nil || st.Pass.Counts["corrupt"] != rotten || st.Pass.Done > n {
		t.Errorf("the pass after two runs over its rotten files: %+v; want %d corrupt, at most %d done", st.Pass, rotten, n)
	}
	code, _ := auditRun(t, d)
	st := auditStatus(t, d)
	l := st.LastPass
	if code != 0 && code != 4 || l == nil {
		t.Fatalf("the rest of the pass: exit %d, %+v", code, st)
	}
	var sum int64
	for _, c := range l.Counts {
		sum += c
	}
	if sum != n || l.Counts["corrupt"] != rotten || l.Counts["ok"] != n-rotten {
		t.Errorf("the completed pass counted %d files (%v); want %d: %d ok, %d corrupt", sum, l.Counts, n, n-rotten, rotten)
	}
}

// Problems held back by on_problem_every when the daemon stops are told
// after its restart: the last held one, with the others it held counted
// as suppressed.
func TestAuditProblemsHeldAcrossRestart(t *testing.T) {
	fs, root, bad := rottenTree(t, 6, 3)
	base := dedupBase(t, "")
	out := filepath.Join(base, "told")
	script := filepath.Join(base, "notify.sh")
	write(t, script, "#!/bin/sh\ncat >> "+out+"\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(base, "config", "annexd", "annexd.toml"),
		auditConf+fmt.Sprintf("on_problem = [%q]\non_problem_every = \"8s\"\n", script))
	d := startOn(t, base, root)
	fs.Sync(t)
	for _, p := range bad {
		fs.FlipByte(t, p, 100)
	}
	if code, run := auditRun(t, d, bad...); code != 4 || run.Counts["corrupt"] != 3 {
		t.Fatalf("audit run: exit %d, %+v", code, run)
	}
	told := func() []map[string]any {
		b, _ := os.ReadFile(out)
		var ms []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l != "" {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("a notification %q: %v", l, err)
				}
				ms = append(ms, m)
			}
		}
		return ms
	}
	for deadline := time.Now().Add(30 * time.Second); len(told()) < 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no problem told within 30 s\n%s", d.log)
		}
	}
	d.stop() // within the 8 s: two problems held
	d = startOn(t, base, root)
	deadline := time.Now().Add(40 * time.Second)
	for {
		ms := told()
		var problems float64
		for _, m := range ms {
			s, _ := m["suppressed"].(float64)
			problems += 1 + s
		}
		if problems >= 3 {
			if len(ms) != 2 || problems != 3 {
				t.Errorf("told %d times for %v problems; want 2 messages for 3: %v", len(ms), problems, ms)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart, %d messages tell of %v of 3 problems: %v\n%s", len(ms), problems, ms, d.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
