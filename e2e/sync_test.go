package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStatusWaitSeesEveryChange is a script: write files into new
// directories, run status --wait at once, then trust status and dups
// (which answer from the index alone). Every file must be there.
func TestStatusWaitSeesEveryChange(t *testing.T) {
	t.Parallel()
	var syncDir string
	d := startDaemon(t, func(root string) {
		// A cookie left by a daemon that was killed.
		syncDir = filepath.Join(filepath.Dir(root), "index.db-sync")
		write(t, filepath.Join(syncDir, "cookie-1-1"), "")
	})
	if _, err := os.Stat(filepath.Join(syncDir, "cookie-1-1")); !os.IsNotExist(err) {
		t.Errorf("stale cookie still there: %v", err)
	}
	if fi, err := os.Stat(syncDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("sync directory: %v %v", fi, err)
	}
	const n = 300
	for round := 1; round <= 2; round++ {
		want := make(map[string]string) // path → the path of its twin
		for i := range n {
			dir := filepath.Join(d.root, fmt.Sprintf("r%d", round), fmt.Sprint(i%15), fmt.Sprint(i%4))
			p := filepath.Join(dir, fmt.Sprintf("f%d.dat", i))
			write(t, p, fmt.Sprintf("round %d pair %d", round, i/2))
			if i%2 == 1 {
				twin := filepath.Join(d.root, fmt.Sprintf("r%d", round), fmt.Sprint((i-1)%15), fmt.Sprint((i-1)%4), fmt.Sprintf("f%d.dat", i-1))
				want[p], want[twin] = twin, p
			}
		}
		if r := d.ctl("", "status", "--wait", "--timeout", "60s"); r.code != 0 {
			t.Fatalf("status --wait: exit %d %s", r.code, r.stderr)
		}
		r := d.ctl("", "status", "--json")
		var st struct {
			Idle  bool  `json:"idle"`
			Files int64 `json:"files"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("status --json: %v (%q)", err, r.stdout)
		}
		if st.Files != int64(round*n) || !st.Idle {
			t.Errorf("round %d: status right after status --wait: %d files, idle %v; want %d, idle",
				round, st.Files, st.Idle, round*n)
		}
		got := dupPairs(t, d)
		for p, twin := range want {
			if got[p] != twin {
				t.Errorf("round %d: dups has %s with %q, want its twin %s", round, p, got[p], twin)
			}
		}
		if len(got) != round*n {
			t.Errorf("round %d: dups lists %d files, want %d", round, len(got), round*n)
		}
	}
	d.stop()
	if _, err := os.Stat(syncDir); !os.IsNotExist(err) {
		t.Errorf("sync directory left after exit: %v", err)
	}
}

// dupPairs runs dups --json and maps each file of a two-file group to the
// other one.
func dupPairs(t *testing.T, d *daemon) map[string]string {
	t.Helper()
	r := d.ctl("", "dups", "--json")
	if r.code != 0 {
		t.Fatalf("dups --json: exit %d %s", r.code, r.stderr)
	}
	got := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var g struct {
			Files []struct {
				Path string `json:"path"`
			} `json:"files"`
		}
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatalf("dups --json line %q: %v", sc.Text(), err)
		}
		if len(g.Files) != 2 {
			t.Errorf("group of %d files: %s", len(g.Files), sc.Text())
			continue
		}
		got[g.Files[0].Path], got[g.Files[1].Path] = g.Files[1].Path, g.Files[0].Path
	}
	return got
}
