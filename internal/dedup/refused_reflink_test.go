package dedup

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/internal/testutil"
)

// chattrNoCOW is FS_NOCOW_FL (chattr +C): btrfs writes such a file in
// place, without checksums, and refuses to share its extents.
const chattrNoCOW = 0x00800000

// TestReflinkCopyTruncatedMidway: a copy truncated after its first part
// was shared is reported as changed, with the bytes already shared and
// freed counted. Before, the run called it "unsupported" and counted
// nothing, though 16 MiB were shared.
func TestReflinkCopyTruncatedMidway(t *testing.T) {
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: loopfs.MinSize[loopfs.XFS]})
	st := openStore(t)
	data := content(46, 40<<20)
	writeFile(t, fs.Path("k"), data)
	writeFile(t, fs.Path("t"), data)
	must(t, os.Chtimes(fs.Path("k"), aLongTimeAgo, aLongTimeAgo))
	recordAll(t, st, fs, "k", "t")
	atSteps(t, map[string]func(){"shared": func() { must(t, os.Truncate(fs.Path("t"), 20<<20)) }})
	_, res, err := runDedup(t, New(st, Options{}), Request{})
	if err != nil || res.Done != 0 || len(res.Skips) != 1 || res.Skips[0].Reason != "changed" {
		t.Fatalf("done %d, skips %v, %v; want the copy skipped as changed", res.Done, res.Skips, err)
	}
	if res.Freed < dedupeChunk {
		t.Errorf("freed %d, want the %d bytes shared before the truncation", res.Freed, dedupeChunk)
	}
	if d := res.Skips[0].Detail; !strings.Contains(d, "of 41943040 bytes were shared") {
		t.Errorf("the skip does not say how much was shared: %q", d)
	}
	assertContent(t, fs.Path("t"), data[:20<<20])
	assertContent(t, fs.Path("k"), data)
}

// TestContinuousRefusedPairStopsOnlyItself: in the background, a pair the
// kernel refuses (on btrfs, a copy in a nodatacow folder; a copy
// truncated while it was shared) is counted and logged, and later pairs
// on the same file system are still deduplicated. Before, the first such
// EINVAL made the whole file system "unsupported" until a restart, and
// nothing was logged.
func TestContinuousRefusedPairStopsOnlyItself(t *testing.T) {
	for _, c := range []struct {
		name  string
		kind  loopfs.Kind
		size  int
		setup func(t *testing.T, fs *loopfs.FS) // before the copy is written
		hook  map[string]func()
		want  Reason
	}{
		{name: "a copy in a nodatacow folder", kind: loopfs.Btrfs, size: 300_000,
			setup: func(t *testing.T, fs *loopfs.FS) {
				must(t, os.Mkdir(fs.Path("nocow"), 0o755))
				chattr(t, fs.Path("nocow"), chattrNoCOW, true)
			}, want: "refused"},
		{name: "a copy truncated while it was shared", kind: loopfs.XFS, size: 40 << 20, want: "changed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := loopfs.New(t, c.kind, loopfs.Options{Size: loopfs.MinSize[c.kind]})
			st := openStore(t)
			if c.setup != nil {
				c.setup(t, fs)
			}
			copyName := "t"
			if c.kind == loopfs.Btrfs {
				copyName = "nocow/t"
			}
			data := content(47, c.size)
			writeFile(t, fs.Path("k"), data)
			writeFile(t, fs.Path(copyName), data)
			must(t, os.Chtimes(fs.Path("k"), aLongTimeAgo, aLongTimeAgo))
			recordAll(t, st, fs, "k", copyName)
			if c.kind == loopfs.XFS {
				atSteps(t, map[string]func(){"shared": func() { must(t, os.Truncate(fs.Path(copyName), 20<<20)) }})
			}
			var logs testutil.Buffer
			clk := &clock{t: time.Now().Add(time.Hour)}
			cont := New(st, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}).Continuous(ContinuousOptions{Now: clk.now})
			must(t, cont.pass(context.Background()))
			if s := cont.Stats(); s.Done != 0 || s.Skipped[c.want] != 1 {
				t.Errorf("first pass: done %d, skipped %v; want the copy skipped as %s", s.Done, s.Skipped, c.want)
			}
			if c.want == "refused" && !strings.Contains(logs.String(), "reason=refused") {
				t.Errorf("the refused pair was not logged:\n%s", logs.String())
			}
			// Two new copies appear later, on the same file system.
			more := content(48, 200_000)
			writeFile(t, fs.Path("x"), more)
			writeFile(t, fs.Path("y"), more)
			recordAll(t, st, fs, "x", "y")
			clk.set(time.Now().Add(2 * time.Hour))
			must(t, cont.pass(context.Background()))
			if s := cont.Stats(); s.Done != 1 {
				t.Errorf("second pass: done %d, skipped %v; want the new pair deduplicated", s.Done, s.Skipped)
			}
			if !sharesAll(t, fs.Path("y"), fs.Path("x")) && !sharesAll(t, fs.Path("x"), fs.Path("y")) {
				t.Error("x and y share nothing")
			}
		})
	}
}
