package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/loopfs"
)

// An audit run while a root's file system is away (a USB disk pulled, a
// lazy unmount) finds nothing at the paths. The files are not missing:
// their file system is elsewhere, the indexer keeps their records. The
// audit leaves them to a later pass, and the findings made before stay
// listed, while the disk is away and once it is back.
func TestAuditWhileFileSystemAway(t *testing.T) {
	t.Parallel()
	needRoot(t, "mount loop images")
	for _, tc := range []struct {
		name string
		sub  string // the root, under the mount point
	}{{"root is the mount point", ""}, {"root is a folder of the mount", "home"}} {
		t.Run(tc.name, func(t *testing.T) {
			fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
			root := fs.Path(tc.sub)
			files := fillTree(t, root, 4, 300)
			d := startOn(t, dedupBase(t, auditConf), root)
			keys := keysOf(t, d, files)
			flagged := files[0]
			fs.Sync(t)
			fs.FlipByte(t, flagged, 100)
			if code, run := auditRun(t, d, "--full-speed"); code != 4 || run.Counts["corrupt"] != 1 {
				t.Fatalf("audit of the flipped file: exit %d %+v", code, run)
			}
			want := map[string]string{flagged: "corrupt"}
			wantProblems(t, d, want)

			fs.Unmount(t)
			waitFor(t, d, 10*time.Second, "status says the root is away", func() bool {
				st := statusJSON(t, d)
				return len(st.Roots) == 1 && st.Roots[0].Away != ""
			})
			code, run := auditRun(t, d, "--full-speed")
			if run.Counts["missing"] != 0 || run.Counts["ok"] != 0 {
				t.Errorf("audit with the file system away: exit %d %+v; want no file counted missing (nor ok)", code, run)
			}
			wantProblems(t, d, want)
			wantAbsent(t, d, flagged, keys[flagged], "corrupt")
			wantAbsent(t, d, files[1], keys[files[1]], "")

			fs.Mount(t)
			d.waitIdle()
			wantProblems(t, d, want)
			wantKept(t, d, flagged, "corrupt", keys[flagged])
			if code, run := auditRun(t, d, "--full-speed"); code != 4 || run.Counts["corrupt"] != 1 || run.Counts["ok"] != int64(len(files)-1) {
				t.Errorf("audit once the file system is back: exit %d %+v; want exit 4, one corrupt, %d ok", code, run, len(files)-1)
			}
			wantProblems(t, d, want)
		})
	}
}

// wantAbsent fails unless lookup says path is on a file system not mounted
// now, with its recorded key and finding (none: "").
func wantAbsent(t *testing.T, d *daemon, path, key, finding string) {
	t.Helper()
	l := lookupJSON(t, d, path)
	if got, _ := l["finding"].(string); l["state"] != "absent" || l["key"] != key || got != finding ||
		!strings.Contains(fmt.Sprint(l["message"]), "not mounted") {
		t.Errorf("lookup %s with its file system away: %v; want absent, key %s, finding %q, a message saying it is not mounted", path, l, key, finding)
	}
	if r := d.ctl("", "lookup", path); r.code != 1 || !strings.Contains(r.stderr, "not mounted") || !strings.Contains(r.stderr, key) {
		t.Errorf("lookup %s with its file system away: exit %d, stderr %q; want exit 1 and a message naming the key and saying it is not mounted", path, r.code, r.stderr)
	}
}
