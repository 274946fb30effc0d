package fsstat_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/annexd/annexd/fsstat"
	"github.com/annexd/annexd/internal/loopfs"
)

// A file system that keeps whole seconds (ext4 with 128-byte inodes) has
// a tick of a second, so that a write later in the second of a hash is
// never hidden; one with nanoseconds keeps the fine tick.
func TestGranularityOfWholeSecondTimestamps(t *testing.T) {
	for _, c := range []struct {
		name string
		mkfs []string
		want string
	}{
		{"ext4, 128-byte inodes", []string{"-I", "128"}, fsstat.SafeGranularity.String()},
		{"ext4, 256-byte inodes", []string{"-I", "256"}, fsstat.FineGranularity.String()},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20, MkfsArgs: c.mkfs})
			p := filepath.Join(fs.Dir, "f")
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			g, err := fsstat.Granularity(p)
			if err != nil || g.String() != c.want {
				t.Errorf("Granularity of a file there: %v %v, want %s", g, err, c.want)
			}
		})
	}
}
