package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/internal/trash"
)

// trashOf is root's trash on fs (the daemon and annexctl run as root).
func trashOf(fs *loopfs.FS) trash.Bin {
	return trash.Bin{Dir: fs.Path(".Trash-0"), Top: fs.Dir, UID: 0}
}

// inTrash returns the file the trash holds for the original path orig,
// checking its info file, or "" when it holds none.
func inTrash(t *testing.T, b trash.Bin, orig string) string {
	t.Helper()
	infos, _ := filepath.Glob(filepath.Join(b.Dir, "info", "*.trashinfo"))
	for _, i := range infos {
		text, err := os.ReadFile(i)
		if err != nil {
			t.Fatal(err)
		}
		in, err := b.Parse(text)
		if err != nil {
			t.Errorf("%s: %v\n%s", i, err, text)
			continue
		}
		if in.Path != orig {
			continue
		}
		if d := time.Since(in.Deleted); d < -time.Second || d > 10*time.Minute {
			t.Errorf("%s: DeletionDate %v", i, in.Deleted)
		}
		if !strings.HasPrefix(string(text), "[Trash Info]\nPath=") || strings.Contains(string(text), "Path=/") {
			t.Errorf("%s: not a relative Path in the first key:\n%s", i, text)
		}
		return filepath.Join(b.Dir, "files", strings.TrimSuffix(filepath.Base(i), ".trashinfo"))
	}
	return ""
}

// On ext4, where blocks cannot be shared, --trash moves the copies to
// $topdir/.Trash-0, keeping the oldest: the dry run lists each group with
// its trash and changes nothing; the run leaves each copy's bytes in
// Trash/files with an info file a file manager restores from; the index
// forgets the copies and never indexes the trash, which lies inside the
// root; a copy put back is indexed again.
func TestDedupTrashExt4(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := fs.Dir
	keep, cp1, cp2, other := fs.Path("keep.iso"), fs.Path("new", "copy.iso"), fs.Path("a b", "copy.iso"), fs.Path("other")
	for _, p := range []string{keep, cp1, cp2} {
		writeRandom(t, p, 5, 1<<20)
	}
	writeRandom(t, other, 6, 1<<20)
	for i, p := range []string{keep, cp1, cp2} { // the oldest first
		at := time.Now().Add(-time.Duration(3-i) * time.Hour)
		os.Chtimes(p, at, at)
	}
	before := statesOf(t, []string{keep, cp1, cp2, other})
	d := startOn(t, dedupBase(t, ""), root)

	b := trashOf(fs)
	dry := d.ctl("", "dedup", "--trash", "--keep", "oldest", "--dry-run")
	want := "will free 2.0 MiB: 2 files in 1 group (trash)\n    2.0 MiB  " + keep + " ← " + cp1 + ", " + cp2 + " → " + b.Dir + "\n"
	if dry.code != 0 || dry.stdout != want {
		t.Fatalf("dry run: exit %d\n%s%s\nwant\n%s", dry.code, dry.stdout, dry.stderr, want)
	}
	sameStates(t, "after the dry run", before)
	if _, err := os.Stat(b.Dir); !os.IsNotExist(err) {
		t.Errorf("the dry run made the trash: %v", err)
	}

	r := d.ctl("", "dedup", "--trash", "--keep", "oldest")
	if r.code != 0 || !strings.Contains(r.stdout, "freed 2.0 MiB in 2 of 2 files") {
		t.Fatalf("dedup --trash: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	sameStates(t, "the keeper and the other file", map[string]fileState{keep: before[keep], other: before[other]})
	for _, cp := range []string{cp1, cp2} {
		if _, err := os.Lstat(cp); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", cp, err)
		}
		f := inTrash(t, b, cp)
		if f == "" {
			t.Fatalf("the trash has no info file for %s", cp)
		}
		if s := stateOf(t, f); s.sum != before[cp].sum || s.ino != before[cp].ino {
			t.Errorf("%s in the trash: %+v, was %+v", f, s, before[cp])
		}
	}
	d.waitIdle()
	for _, p := range []string{cp1, cp2, filepath.Join(b.Dir, "files", "copy.iso")} {
		if r := d.ctl("", "lookup", p); r.code == 0 {
			t.Errorf("lookup %s after the trash: %q, want it unknown", p, r.stdout)
		}
	}
	if r := d.ctl("", "dups"); strings.Contains(r.stdout, "copy.iso") {
		t.Errorf("dups after the trash:\n%s", r.stdout)
	}
	// Restored as a file manager does: the info file says where to.
	f := inTrash(t, b, cp2)
	if err := os.Rename(f, cp2); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(b.Dir, "info", filepath.Base(f)+".trashinfo"))
	if r := d.ctl("", "lookup", "--wait", cp2); r.code != 0 || strings.TrimSpace(r.stdout) != calckey(t, cp2) {
		t.Errorf("lookup of the restored copy: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// --keep newest, oldest and under=DIR on XFS pick the keeper whose blocks
// the others come to share: its own blocks stay where they were and each
// copy's first byte lies in them afterwards.
func TestDedupKeepXFS(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	root := fs.Path("home")
	now := time.Now()
	groups := map[string][]string{}
	for gi, g := range []string{"newest", "oldest", "under"} {
		for i, dir := range []string{"b", "a/deep", "c"} {
			p := filepath.Join(root, g, dir, "f.raw")
			writeRandom(t, p, uint64(10+gi), 1<<20)
			at := now.Add(-time.Duration(i+1) * time.Hour) // b newest, c oldest
			os.Chtimes(p, at, at)
			groups[g] = append(groups[g], p)
		}
	}
	d := startOn(t, dedupBase(t, ""), root)
	for _, c := range []struct {
		group, keep string
		keeper      int
	}{
		{"newest", "newest", 0},
		{"oldest", "oldest", 2},
		{"under", "under=" + filepath.Join(root, "under", "a"), 1},
	} {
		ps := groups[c.group]
		at := map[string]int64{}
		for _, p := range ps {
			at[p], _ = loopfs.Physical(t, p)
		}
		plan := d.ctl("", "dedup", "--keep", c.keep, "--dry-run", "--json", filepath.Join(root, c.group))
		if got := planKeeper(t, plan.stdout); got != ps[c.keeper] {
			t.Errorf("--keep %s: the plan keeps %s, want %s\n%s%s", c.keep, got, ps[c.keeper], plan.stdout, plan.stderr)
		}
		r := d.ctl("", "dedup", "--keep", c.keep, filepath.Join(root, c.group))
		if r.code != 0 || !strings.Contains(r.stdout, "in 2 of 2 files") {
			t.Fatalf("--keep %s: exit %d\n%s%s", c.keep, r.code, r.stdout, r.stderr)
		}
		keeper := ps[c.keeper]
		if now, _ := loopfs.Physical(t, keeper); now != at[keeper] {
			t.Errorf("--keep %s: the keeper %s moved from %d to %d", c.keep, keeper, at[keeper], now)
		}
		for _, p := range ps {
			if now, _ := loopfs.Physical(t, p); now != at[keeper] {
				t.Errorf("--keep %s: %s starts at %d, not in the keeper's blocks at %d", c.keep, p, now, at[keeper])
			}
		}
	}
	if r := d.ctl("", "dedup", "--keep", "latest"); r.code != 2 || !strings.Contains(r.stderr, "give newest, oldest, shortest-path or under=DIR") {
		t.Errorf("--keep latest: exit %d %q", r.code, r.stderr)
	}
	if r := d.ctl("", "dedup", "--trash", "--hardlink"); r.code != 2 {
		t.Errorf("--trash --hardlink: exit %d %q", r.code, r.stderr)
	}
}

// planKeeper is the keeper of the one group of a --json dry run.
func planKeeper(t *testing.T, out string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		var ev api.DedupEvent
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Group != nil {
			return string(ev.Group.Keeper)
		}
	}
	return ""
}

// The daemon SIGKILLed between a copy's .trashinfo and its rename (a
// test seam kills it there): the copy is still at its name and the info
// file waits in the trash; the restart's recovery removes the info file,
// and the next run moves the copy with its info, so the copy was never
// nowhere.
func TestDedupTrashKilled(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := fs.Path("home")
	keep, cp := filepath.Join(root, "keep.bin"), filepath.Join(root, "copy.bin")
	writeRandom(t, keep, 7, 256<<10)
	writeRandom(t, cp, 7, 256<<10)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(keep, old, old)
	before := stateOf(t, cp)
	base := dedupBase(t, "")
	d := spawn(t, annexdRun{base: base, roots: []string{root},
		env: func(env []string) []string { return append(env, "ANNEXD_TEST_DEDUP_KILL=trash-info") }})
	d.waitIdle()
	r := d.ctl("", "dedup", "--trash")
	<-d.done
	d.exited = true
	if r.code == 0 {
		t.Fatalf("dedup --trash ended well though the daemon was killed:\n%s%s", r.stdout, r.stderr)
	}
	b := trashOf(fs)
	if s := stateOf(t, cp); s != before {
		t.Errorf("the copy after the kill: %+v, was %+v", s, before)
	}
	infos, _ := filepath.Glob(filepath.Join(b.Dir, "info", "*.trashinfo"))
	if len(infos) != 1 {
		t.Fatalf("info files after the kill: %v, want the one written before the rename", infos)
	}
	d2 := startOn(t, base, root)
	if infos, _ := filepath.Glob(filepath.Join(b.Dir, "info", "*.trashinfo")); len(infos) != 0 {
		t.Errorf("info files after recovery: %v\n%s", infos, d2.log)
	}
	if s := stateOf(t, cp); s != before {
		t.Errorf("the copy after recovery: %+v, was %+v", s, before)
	}
	if r := d2.ctl("", "dedup", "--trash"); r.code != 0 {
		t.Fatalf("dedup --trash after the restart: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if f := inTrash(t, b, cp); f == "" || stateOf(t, f).sum != before.sum {
		t.Errorf("the copy is not in the trash with its info after the second run (%q)", f)
	}
}

// A copy written to by another program as the daemon reaches it stays
// where it is, with what was written, and nothing of it goes to the
// trash.
func TestDedupTrashWrittenBefore(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := fs.Path("home")
	data := hardlinkTree(t, root, 6, 2, 64<<10)
	var copies []string // c1 of each group; c0 is the oldest, the keeper
	for name := range data {
		if strings.HasSuffix(name, "c1") {
			copies = append(copies, name)
		}
	}
	d := startOn(t, dedupBase(t, ""), root)
	s := newScribe()
	r := ctlWhile(t, d, func(stop <-chan struct{}) { attackSteps(t, s, copies, stop) }, "dedup", "--trash", "--keep", "oldest")
	if r.code != 1 || s.lines() == 0 {
		t.Fatalf("dedup --trash under writers: exit %d, %d lines written\n%s%s", r.code, s.lines(), r.stdout, r.stderr)
	}
	b := trashOf(fs)
	written, moved := map[string][]byte{}, 0
	for _, cp := range copies {
		if len(s.written[cp]) == 0 { // reached before the watch began: moved or not, as it was
			if f := inTrash(t, b, cp); f != "" {
				moved++
				assertBytes(t, f, data[cp])
			}
			continue
		}
		written[cp] = data[cp]
		if f := inTrash(t, b, cp); f != "" {
			t.Errorf("%s, written during the run, went to the trash as %s\n%s", cp, f, r.stdout)
		}
	}
	if a := s.verify(t, root, written); a.lost+a.misplaced+len(a.broken) > 0 {
		t.Errorf("after the run: %s\n%s", a, r.stdout)
	}
	t.Logf("%d copies written during the run, all kept in place; %d reached before moved", len(written), moved)
}

// assertBytes fails unless the file at path holds want.
func assertBytes(t *testing.T, path string, want []byte) {
	t.Helper()
	if got, err := os.ReadFile(path); err != nil || string(got) != string(want) {
		t.Errorf("%s: %d bytes, %v; want the %d bytes of the copy", path, len(got), err, len(want))
	}
}

// The home trash: with $XDG_DATA_HOME on the copies' file system (and
// inside the root), --trash moves them to $XDG_DATA_HOME/Trash with
// absolute paths in their info files, and the daemon never indexes that
// trash although it lies inside its root.
func TestDedupTrashHome(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := fs.Path("home")
	dataHome := filepath.Join(root, ".local", "share")
	if err := os.MkdirAll(dataHome, 0o700); err != nil {
		t.Fatal(err)
	}
	keep, cp := filepath.Join(root, "keep.bin"), filepath.Join(root, "docs", "copy.bin")
	writeRandom(t, keep, 8, 128<<10)
	writeRandom(t, cp, 8, 128<<10)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(keep, old, old)
	d := startOn(t, dedupBase(t, ""), root)
	env := append(slices.Clone(d.env), "XDG_DATA_HOME="+dataHome)
	r := runCtl(t, env, "", "", "dedup", "--trash", "--keep", "oldest")
	if r.code != 0 || !strings.Contains(r.stdout, "in 1 of 1 file") {
		t.Fatalf("dedup --trash: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b := trash.Bin{Dir: filepath.Join(dataHome, "Trash"), UID: 0}
	text, err := os.ReadFile(filepath.Join(b.Dir, "info", "copy.bin.trashinfo"))
	if err != nil || !strings.HasPrefix(string(text), "[Trash Info]\nPath="+cp+"\nDeletionDate=") {
		t.Fatalf("the home trash's info file: %v\n%s", err, text)
	}
	moved := filepath.Join(b.Dir, "files", "copy.bin")
	if got, err := os.ReadFile(moved); err != nil || calckey(t, moved) != calckey(t, keep) {
		t.Fatalf("the home trash's file: %d bytes, %v", len(got), err)
	}
	d.waitIdle()
	for _, p := range []string{cp, moved} {
		if r := d.ctl("", "lookup", p); r.code == 0 {
			t.Errorf("lookup %s: %q, want it unknown", p, r.stdout)
		}
	}
}
