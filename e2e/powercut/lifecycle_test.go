//go:build powercut

package powercut

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

// TestMachineLife puts the daemon through a machine's ordinary life, on
// each file system, and counts what it got wrong (RELIABILITY.md):
//
//   - a reboot: the daemon stopped, the file system unmounted, the page
//     cache dropped, the image bound to another loop device (st_dev
//     changes, as USB disks, LVM and loop devices do across reboots),
//     mounted again, a few files rotted meanwhile, the daemon started.
//     Nothing unchanged is hashed again, no record is lost, every finding
//     made before stays, and the audit finds the new rot;
//
//   - a remount under the running daemon: the file system unmounted and
//     mounted again, files made right after. The root is watched again
//     with nobody asking; the seconds until the new files are indexed are
//     measured (goal ≤ 5 s).
//
//     go test -tags powercut -run TestMachineLife -v ./e2e/powercut/ [-runs 3] [-files 200]
func TestMachineLife(t *testing.T) {
	var summary []string
	for _, kind := range loopfs.Kinds {
		var sum lifeTally
		t.Run(string(kind), func(t *testing.T) {
			for i := range *runsFlag {
				got := machineLife(t, kind, uint64(i))
				t.Logf("run %d: %+v", i+1, got)
				sum.add(got)
			}
			if sum.rehashed > 0 || sum.lost > 0 || sum.findingsKept != sum.findings || sum.rotFound != sum.rotted || sum.wrong > 0 {
				t.Errorf("%+v", sum)
			}
			if sum.maxRewatch > 5*time.Second {
				t.Errorf("a remounted root took %v to be watched again; goal 5 s", sum.maxRewatch)
			}
		})
		summary = append(summary, fmt.Sprintf("%-6s runs %d  files %5d  hashed again %d  records lost %d  findings kept %d of %d  rot found %d of %d  wrong keys %d  rewatched within %v",
			kind, sum.runs, sum.files, sum.rehashed, sum.lost, sum.findingsKept, sum.findings, sum.rotFound, sum.rotted, sum.wrong, sum.maxRewatch.Round(10*time.Millisecond)))
	}
	t.Logf("summary:\n%s", strings.Join(summary, "\n"))
}

// lifeTally counts what the runs of one file system found.
type lifeTally struct {
	runs, files, rehashed, lost int
	findings, findingsKept      int
	rotted, rotFound            int
	wrong                       int
	maxRewatch                  time.Duration
}

func (t *lifeTally) add(o lifeTally) {
	t.runs += o.runs
	t.files += o.files
	t.rehashed += o.rehashed
	t.lost += o.lost
	t.findings += o.findings
	t.findingsKept += o.findingsKept
	t.rotted += o.rotted
	t.rotFound += o.rotFound
	t.wrong += o.wrong
	t.maxRewatch = max(t.maxRewatch, o.maxRewatch)
}

// machineLife runs the reboot and the remount once.
func machineLife(t *testing.T, kind loopfs.Kind, seed uint64) lifeTally {
	base := tempBase(t)
	writeConfig(t, base, "[audit]\nmax_load = -1.0\nignore_battery = true\n")
	img := loopfs.New(t, kind, loopfs.Options{Size: 512 << 20})
	root := filepath.Join(img.Dir, "tree")
	paths := writeTree(t, root, *filesFlag, seed, 128<<10)
	age(t, paths)
	index := filepath.Join(base, "state", "index.db")
	d := startDaemon(t, base, index, root, nil)
	d.waitIdle()
	got := lifeTally{runs: 1, files: len(paths)}

	// Findings before the reboot: rot the audit flags. btrfs checks its
	// own blocks and FIEMAP gives it no device offset: no rot there.
	var flagged, rotten []string
	if kind != loopfs.Btrfs {
		flagged, rotten = paths[:3], paths[3:6]
		syncDir(t, img.Dir)
		for _, p := range flagged {
			img.FlipByte(t, p, 1)
		}
		if code, _ := d.ctl("", "audit", "run", "--wait", "--full-speed"); code != 4 {
			t.Fatalf("audit before the reboot: exit %d, want 4\n%s", code, d.log)
		}
		got.findings = len(flagged)
	}
	d.stop()

	// The reboot.
	img.Unmount(t)
	dropCaches(t)
	img.Renumber(t)
	for _, p := range rotten {
		img.FlipByte(t, p, 2)
	}
	got.rotted = len(rotten)
	d = startDaemon(t, base, index, root, nil)
	d.waitIdle()
	st := d.status()
	got.rehashed = int(st.Scan.FilesHashed)
	got.lost = len(paths) - int(st.Files)
	if code, _ := d.ctl("", "audit", "run", "--wait", "--full-speed"); code != 0 && code != 4 {
		t.Fatalf("audit after the reboot: exit %d\n%s", code, d.log)
	}
	problems := d.problems()
	for _, p := range flagged {
		if problems[p] {
			got.findingsKept++
		}
	}
	for _, p := range rotten {
		if problems[p] {
			got.rotFound++
		}
	}
	got.wrong = d.wrongKeys(unflagged(paths, problems), digests(t, unflagged(paths, problems))).wrong

	// The remount under the running daemon. Nobody asks about the new
	// files until they are counted: a lookup would hash them itself.
	img.Unmount(t)
	img.Mount(t)
	back := time.Now()
	made := writeTree(t, filepath.Join(root, "after-mount"), 6, seed+100, 4<<10)
	for d.status().Files < int64(len(paths)+len(made)) {
		if time.Since(back) > 30*time.Second {
			t.Fatalf("files made after the remount not indexed in 30 s\n%s", d.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got.maxRewatch = time.Since(back)
	d.waitIdle()
	got.wrong += d.wrongKeys(made, digests(t, made)).wrong
	d.stop()
	return got
}

// unflagged returns the paths that are not problems.
func unflagged(paths []string, problems map[string]bool) []string {
	var out []string
	for _, p := range paths {
		if !problems[p] {
			out = append(out, p)
		}
	}
	return out
}

// age sets the files' mtimes an hour back, so no record is racily clean.
func age(t *testing.T, paths []string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	for _, p := range paths {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
}

func writeConfig(t *testing.T, base, conf string) {
	t.Helper()
	p := filepath.Join(base, "config", "annexd", "annexd.toml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
}

// dropCaches drops the page cache, as a reboot empties it.
func dropCaches(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		t.Fatalf("drop caches: %v", err)
	}
}

// daemonStatus is the part of status --json the scenario reads.
type daemonStatus struct {
	Files int64 `json:"files"`
	Scan  struct {
		FilesHashed int64 `json:"files_hashed"`
	} `json:"scan"`
}

func (d *daemon) status() daemonStatus {
	d.t.Helper()
	code, out := d.ctl("", "status", "--json")
	var st daemonStatus
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		d.t.Fatalf("status --json: exit %d %v\n%s", code, err, out)
	}
	return st
}

// problems returns the paths audit problems lists.
func (d *daemon) problems() map[string]bool {
	d.t.Helper()
	code, out := d.ctl("", "audit", "problems", "--json")
	if code != 0 {
		d.t.Fatalf("audit problems: exit %d\n%s", code, out)
	}
	got := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var p struct {
			Path string `json:"path"`
		}
		if l != "" && json.Unmarshal([]byte(l), &p) == nil {
			got[p.Path] = true
		}
	}
	return got
}
