package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A flagged file renamed over another indexed file while the daemon is
// stopped (mv rotten.jpg kept.jpg), and two files swapping names: the
// finding follows the rotten bytes to the name they have now, and those
// bytes never become that name's key.
func TestRotFindingRenamedOverAnother(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		swap          bool   // the other file takes the flagged one's old name
		victim, other string // their names: checked in either order
	}{
		{"renamed over another", false, "victim.bin", "other.bin"},
		{"names swapped", true, "victim.bin", "other.bin"},
		{"names swapped the other way", true, "a.bin", "z.bin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, root := rotImage(t)
			victim, other := filepath.Join(root, tc.victim), filepath.Join(root, tc.other)
			writeAged(t, victim, 350, 64<<10)
			writeAged(t, other, 351, 64<<10)
			base := dedupBase(t, auditConf)
			d := startOn(t, base, root)
			key, otherKey := lookupJSON(t, d, victim)["key"].(string), lookupJSON(t, d, other)["key"].(string)
			rot(t, fs, victim)
			auditFindsOneCorrupt(t, d)
			d.stop()
			tmp := filepath.Join(root, "tmp.bin")
			if tc.swap {
				if err := os.Rename(other, tmp); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Rename(victim, other); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{other: "corrupt"}
			if tc.swap {
				if err := os.Rename(tmp, victim); err != nil {
					t.Fatal(err)
				}
			}
			d = startOn(t, base, root)
			d.waitIdle()
			wantKept(t, d, other, "corrupt", strings.Replace(key, tc.victim, tc.other, 1))
			wantProblems(t, d, want)
			if tc.swap {
				if l := lookupJSON(t, d, victim); l["state"] != "current" || l["key"] != strings.Replace(otherKey, tc.other, tc.victim, 1) {
					t.Errorf("lookup %s, the healthy file: %v; want current with %s", victim, l, otherKey)
				}
			}
			if code, run := auditRun(t, d, "--full-speed"); code != 4 || run.Counts["corrupt"] != 1 {
				t.Errorf("audit run after the renames: exit %d, %+v\n%s", code, run, d.log)
			}
			wantProblems(t, d, want)
		})
	}
}
