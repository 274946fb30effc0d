package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/api"
	"github.com/annexd/annexd/internal/loopfs"
)

// The deduplication tests run the real daemon and annexctl on roots in
// loop-mounted images; internal/loopfs fails a test that cannot mount.

// dedupBase makes the directory of a daemon's index, socket and config,
// off the image, with a config file holding conf when it is not "".
func dedupBase(t *testing.T, conf string) string {
	t.Helper()
	base, err := os.MkdirTemp("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	base, _ = filepath.EvalSymlinks(base)
	t.Cleanup(func() { os.RemoveAll(base) })
	if conf != "" {
		write(t, filepath.Join(base, "config", "annexd", "annexd.toml"), conf)
	}
	return base
}

// writeRandom writes size bytes drawn from seed, the same for one seed.
func writeRandom(t *testing.T, path string, seed uint64, size int) {
	t.Helper()
	b := make([]byte, size)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(b)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fileState is what deduplication must leave as it was.
type fileState struct {
	ino   uint64
	mtime int64
	sum   [32]byte
}

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileState{ino: st.Ino, mtime: st.Mtim.Nano(), sum: sha256.Sum256(b)}
}

func statesOf(t *testing.T, paths []string) map[string]fileState {
	out := map[string]fileState{}
	for _, p := range paths {
		out[p] = stateOf(t, p)
	}
	return out
}

// sameStates fails for each file whose inode, mtime or content changed.
func sameStates(t *testing.T, when string, before map[string]fileState) {
	t.Helper()
	for p, b := range before {
		if a := stateOf(t, p); a != b {
			t.Errorf("%s: %s changed: %+v, was %+v", when, p, a, b)
		}
	}
}

// dedupStatus returns the status's deduplication counts.
func dedupStatus(t *testing.T, d *daemon) api.DedupStatus {
	t.Helper()
	r := d.ctl("", "status", "--json")
	var st api.Status
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil || st.Dedup == nil {
		t.Fatalf("status --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return *st.Dedup
}

// metric returns the value of one Prometheus sample from /metrics.
func metric(t *testing.T, d *daemon, name string) float64 {
	t.Helper()
	b := metricsText(t, d)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(b)
	if m == nil {
		t.Fatalf("metrics have no %s:\n%s", name, b)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// On XFS with reflink: a dry run changes nothing; the run makes every copy
// share its keeper's blocks, keeping contents, inodes and mtimes, frees
// the copies' space, and says so; a second run has nothing to do; the
// index still agrees with the files; status and metrics count it all.
func TestDedupReflinkXFS(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	root := fs.Path("home")
	const size = 4 << 20
	orig, link := filepath.Join(root, "photos/orig.raw"), filepath.Join(root, "photos/link.raw")
	copies := []string{filepath.Join(root, "backup/orig.raw"), filepath.Join(root, "backup/ORIG.RAW"), filepath.Join(root, "backup/caf\xe9.raw")}
	small := []string{filepath.Join(root, "a/small.txt"), filepath.Join(root, "b/small.txt")}
	unique := filepath.Join(root, "unique.bin")
	for _, p := range append([]string{orig}, copies...) {
		writeRandom(t, p, 1, size)
	}
	if err := os.Link(orig, link); err != nil { // one file, two names: not a duplicate
		t.Fatal(err)
	}
	for _, p := range small {
		writeRandom(t, p, 2, 3000)
	}
	writeRandom(t, unique, 3, 1<<20)
	all := append(append([]string{orig, link, unique}, copies...), small...)
	before := statesOf(t, all)
	d := startOn(t, dedupBase(t, ""), root)

	free := fs.Free(t)
	dry := d.ctl("", "dedup", "--dry-run")
	lines := strings.Split(dry.stdout, "\n")
	if dry.code != 0 || lines[0] != "will free 12.0 MiB: 4 files in 2 groups (reflink)" {
		t.Fatalf("dry run: exit %d\n%s%s", dry.code, dry.stdout, dry.stderr)
	}
	if g := lines[1]; !strings.HasPrefix(g, "   12.0 MiB  "+link+" ← ") || strings.Count(g, root+"/backup/") != 3 {
		t.Errorf("largest group %q: want the keeper with most names, then its 3 copies", g)
	}
	if again := d.ctl("", "dedup", "--dry-run"); again.stdout != dry.stdout {
		t.Errorf("a second dry run plans otherwise, so the first changed something:\n%s", again.stdout)
	}
	sameStates(t, "after the dry runs", before)
	checkDedupNUL(t, d, link, copies, small)
	checkDedupJSONPlan(t, d)

	r := d.ctl("", "dedup")
	if r.code != 0 || !regexp.MustCompile(`(?m)^freed 12\.0 MiB in 4 of 4 files \(\d+\.\d s\)$`).MatchString(r.stdout) || r.stderr != "" {
		t.Fatalf("dedup: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	sameStates(t, "after the run", before)
	if got, want := fs.Free(t)-free, int64(3*size*99/100); got < want {
		t.Errorf("the file system gained %d free bytes, want at least %d (99%% of the copies)", got, want)
	}
	r = d.ctl("", "dedup")
	if r.code != 0 || r.stdout != "nothing to free (reflink; 4 already shared)\n" {
		t.Errorf("second run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, p := range []string{copies[0], copies[2], small[1]} {
		if r := d.ctl("", "lookup", p); r.code != 0 || strings.TrimSpace(r.stdout) != calckey(t, p) {
			t.Errorf("lookup %s after dedup: exit %d %q %q", p, r.code, r.stdout, r.stderr)
		}
	}
	st := dedupStatus(t, d)
	if st.FreedBytes < 3*size || st.Pairs != 4 || st.Runs != 6 || st.Continuous || len(st.Skipped) != 0 {
		t.Errorf("status dedup %+v", st)
	}
	if r := d.ctl("", "status"); !strings.Contains(r.stdout, "dedup:   freed 12.0 MiB in 4 files since start (6 runs asked); continuous off") {
		t.Errorf("status:\n%s", r.stdout)
	}
	if v := metric(t, d, "annexd_dedup_requested_freed_bytes_total"); v < 3*size {
		t.Errorf("annexd_dedup_requested_freed_bytes_total %v", v)
	}
}

// checkDedupNUL: -z prints each group's paths, keeper first, each ending
// with NUL and one more NUL after the group; the rest goes to stderr.
func checkDedupNUL(t *testing.T, d *daemon, keeper string, copies, small []string) {
	t.Helper()
	r := d.ctl("", "dedup", "--dry-run", "-z")
	groups := strings.Split(strings.TrimSuffix(r.stdout, "\x00\x00"), "\x00\x00")
	if r.code != 0 || len(groups) != 2 || !strings.HasPrefix(r.stderr, "will free 12.0 MiB") {
		t.Fatalf("-z: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	big := strings.Split(groups[0], "\x00")
	if big[0] != keeper || !sameSet(big[1:], copies) {
		t.Errorf("-z first group %q, want %s then %q", big, keeper, copies)
	}
	if got := strings.Split(groups[1], "\x00"); !sameSet(got, small) {
		t.Errorf("-z second group %q, want %q", got, small)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// checkDedupJSONPlan: --json passes the plan, every group and the end
// line through, and nothing else.
func checkDedupJSONPlan(t *testing.T, d *daemon) {
	t.Helper()
	r := d.ctl("", "dedup", "--dry-run", "--json")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 4 || r.stderr != "" {
		t.Fatalf("--json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var plan api.DedupEvent
	if err := plan.UnmarshalJSON([]byte(lines[0])); err != nil || plan.Plan == nil || plan.Plan.Actions != 4 || !plan.Plan.DryRun {
		t.Errorf("plan line %s: %v", lines[0], err)
	}
	var g api.DedupEvent
	if err := g.UnmarshalJSON([]byte(lines[1])); err != nil || g.Group == nil || len(g.Group.Targets) != 3 {
		t.Errorf("group line %s: %v", lines[1], err)
	}
	var end api.DedupEnd
	if err := json.Unmarshal([]byte(lines[3]), &end); err != nil || !end.End || end.Count != 3 || end.Result == nil || !end.Result.DryRun {
		t.Errorf("end line %s: %v", lines[3], err)
	}
}

// A pair the kernel refuses (an immutable copy) is skipped alone: the
// other copy is done, the run says which and why, and exits 1.
func TestDedupSkipReported(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	root := fs.Path("home")
	keep, done, stuck := filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c")
	for _, p := range []string{keep, done, stuck} {
		writeRandom(t, p, 4, 1<<20)
	}
	setImmutable(t, stuck, true)
	t.Cleanup(func() { setImmutable(t, stuck, false) }) // before the unmount
	before := statesOf(t, []string{keep, done, stuck})
	d := startOn(t, dedupBase(t, ""), root)
	r := d.ctl("", "dedup")
	want := "skipped 1: refused 1\n  refused  " + stuck + " (keeper " + keep + "): FIDEDUPERANGE"
	if r.code != 1 || !strings.Contains(r.stdout, "freed 1.0 MiB in 1 of 2 files") || !strings.Contains(r.stdout, want) ||
		!strings.HasSuffix(r.stdout, "operation not permitted\n") {
		t.Errorf("dedup: exit %d\n%s%s\nwant it to end with\n%s…operation not permitted", r.code, r.stdout, r.stderr, want)
	}
	sameStates(t, "after the run", before)
	if st := dedupStatus(t, d); st.Pairs != 1 || st.Skipped["refused"] != 1 {
		t.Errorf("status dedup %+v", st)
	}
}

// fsImmutableFL is FS_IMMUTABLE_FL of linux/fs.h (chattr +i).
const fsImmutableFL = 0x10

func setImmutable(t *testing.T, path string, on bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetInt(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatal(err)
	}
	if on {
		flags |= fsImmutableFL
	} else {
		flags &^= fsImmutableFL
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, flags); err != nil {
		t.Fatal(err)
	}
}

// On ext4, which cannot share extents, the run names the file system and
// --hardlink and changes nothing; --hardlink then links the copy to its
// keeper, leaving no temporary name behind.
func TestDedupExt4(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := fs.Path("home")
	keep, cp, other := filepath.Join(root, "keep.iso"), filepath.Join(root, "copy.iso"), filepath.Join(root, "other")
	writeRandom(t, keep, 5, 1<<20)
	writeRandom(t, other, 6, 1<<20)
	writeRandom(t, cp, 5, 1<<20)
	// The older of two copies is the keeper.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(keep, old, old); err != nil {
		t.Fatal(err)
	}
	before := statesOf(t, []string{keep, cp, other})
	d := startOn(t, dedupBase(t, ""), root)

	r := d.ctl("", "dedup")
	if r.code != 1 || r.stdout != "nothing to free (reflink)\n" ||
		!strings.Contains(r.stderr, "annexctl: dedup: ext4 cannot share extents (holding ") ||
		!strings.Contains(r.stderr, "1 file in 1 group left as they are; --hardlink links duplicates instead") {
		t.Errorf("reflink on ext4: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	sameStates(t, "after reflink on ext4", before)

	r = d.ctl("", "dedup", "--hardlink", "--dry-run")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "will free 1.0 MiB: 1 file in 1 group (hardlink)\n") {
		t.Errorf("hardlink dry run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	sameStates(t, "after the hardlink dry run", before)
	free := fs.Free(t)
	r = d.ctl("", "dedup", "--hardlink", root)
	if r.code != 0 || !strings.Contains(r.stdout, "in 1 of 1 file") {
		t.Fatalf("hardlink: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	kept, linked := stateOf(t, keep), stateOf(t, cp)
	if kept != before[keep] || linked.ino != kept.ino || linked.sum != before[cp].sum {
		t.Errorf("after hardlink: keeper %+v copy %+v (before %+v, %+v)", kept, linked, before[keep], before[cp])
	}
	if got := fs.Free(t) - free; got < 1<<20*99/100 {
		t.Errorf("hardlink freed %d bytes", got)
	}
	names, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range names {
		got = append(got, n.Name())
	}
	if !slices.Equal(got, []string{"copy.iso", "keep.iso", "lost+found", "other"}) && !slices.Equal(got, []string{"copy.iso", "keep.iso", "other"}) {
		t.Errorf("names left in the root: %q", got)
	}
	if r := d.ctl("", "lookup", "--wait", cp); r.code != 0 || strings.TrimSpace(r.stdout) != calckey(t, cp) {
		t.Errorf("lookup of the linked copy: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := d.ctl("", "dedup", "--hardlink"); r.code != 0 || !strings.HasPrefix(r.stdout, "nothing to free (hardlink)") {
		t.Errorf("second hardlink run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Bad flags and paths are exit 2 with nothing done; no daemon is exit 3.
func TestDedupUsage(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(root string) {
		write(t, filepath.Join(root, "a"), "same")
		write(t, filepath.Join(root, "b"), "same")
	})
	for _, args := range [][]string{
		{"dedup", "/etc"}, {"dedup", d.root, "/etc"}, {"dedup", "--min-size", "lots"}, {"dedup", "--json", "-z"}, {"dedup", ""},
	} {
		if r := d.ctl("", args...); r.code != 2 || r.stdout != "" || !strings.HasPrefix(r.stderr, "annexctl: dedup: ") {
			t.Errorf("%q: exit %d %q %q; want exit 2", args, r.code, r.stdout, r.stderr)
		}
	}
	if st := dedupStatus(t, d); st.Runs != 0 {
		t.Errorf("refused requests were run: %+v", st)
	}
	r := d.ctlIn(d.root, "", "dedup", "--dry-run", "--hardlink", ".")
	// The bytes are what the file system holds for the copy: 4 B or a block.
	plan := regexp.MustCompile(`^will free [0-9.]+ K?i?B: 1 file in 1 group \(hardlink\)\n +[0-9.]+ K?i?B  ` +
		regexp.QuoteMeta(d.root+"/a ← "+d.root+"/b") + "\n$")
	if r.code != 0 || !plan.MatchString(r.stdout) {
		t.Errorf("relative PATH: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	env := append(slices.Clone(d.env), "ANNEXD_SOCKET="+filepath.Join(t.TempDir(), "none.sock"))
	if r := runCtl(t, env, "", "", "dedup"); r.code != 3 {
		t.Errorf("no daemon: exit %d %q", r.code, r.stderr)
	}
}

// The background mode deduplicates copies once they have been left alone
// for its quiet time, and status and metrics count what it freed.
func TestDedupContinuous(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	root := fs.Path("home")
	files := []string{filepath.Join(root, "x/a.bin"), filepath.Join(root, "y/b.bin")}
	for _, p := range files {
		writeRandom(t, p, 7, 2<<20)
	}
	before := statesOf(t, files)
	free := fs.Free(t)
	// No load gate: the machine running the tests may be busy.
	conf := "[dedup]\ncontinuous = true\nquiet = \"1s\"\ninterval = \"200ms\"\nmax_load = -1.0\nignore_battery = true\n"
	d := startOn(t, dedupBase(t, conf), root)
	deadline := time.Now().Add(time.Minute)
	var st api.DedupStatus
	for st = dedupStatus(t, d); st.Pairs < 1; st = dedupStatus(t, d) {
		if time.Now().After(deadline) {
			t.Fatalf("nothing deduplicated in the background after a minute: %+v\n%s", st, d.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !st.Continuous || st.FreedBytes < 2<<20 || st.Runs != 0 || st.Passes < 1 {
		t.Errorf("status dedup %+v", st)
	}
	sameStates(t, "after the background pass", before)
	if got := fs.Free(t) - free; got < 2<<20*99/100 {
		t.Errorf("the background mode freed %d bytes", got)
	}
	if v := metric(t, d, "annexd_dedup_freed_bytes_total"); v < 2<<20 {
		t.Errorf("annexd_dedup_freed_bytes_total %v", v)
	}
	if r := d.ctl("", "status"); !strings.Contains(r.stdout, "continuous on, 0 pending") {
		t.Errorf("status:\n%s", r.stdout)
	}
	if r := d.ctl("", "dedup"); r.code != 0 || r.stdout != "nothing to free (reflink; 1 already shared)\n" {
		t.Errorf("a run after the background mode: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// The daemon acts for the user who asks, as the socket tells it: run as
// nobody, it links nobody's copies, and skips root's readable copy as
// "permission" when nobody asks. Root may ask too, and then the kernel
// refuses the daemon (uid nobody) the same copy: a run never does more
// than its daemon could.
func TestDedupActsForTheCaller(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	// nobody must reach the mount point and run the binaries.
	for _, dir := range []string{filepath.Dir(fs.Dir), filepath.Dir(filepath.Dir(fs.Dir)), bin.dir} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root := fs.Path("home")
	own := []string{filepath.Join(root, "own/a"), filepath.Join(root, "own/b")}
	theirs := []string{filepath.Join(root, "root/x"), filepath.Join(root, "root/y")}
	for _, p := range own {
		writeRandom(t, p, 8, 1<<20)
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range theirs {
		writeRandom(t, p, 9, 1<<20) // 0644: nobody may read, not write
	}
	base := dedupBase(t, "")
	if err := os.Chown(base, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	d := startAs(t, base, nobody, root)

	r := ctlAs(t, d, nobody, "dedup")
	if r.code != 1 || !strings.Contains(r.stdout, "freed 1.0 MiB in 1 of 2 files") ||
		!strings.Contains(r.stdout, "skipped 1: permission 1\n  permission  ") {
		t.Fatalf("dedup as nobody: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if a, b := stateOf(t, theirs[0]), stateOf(t, theirs[1]); a.ino == b.ino {
		t.Error("root's copies were linked")
	}
	r = d.ctl("", "dedup")
	if r.code != 1 || !strings.Contains(r.stdout, "skipped 1: refused 1\n  refused  ") {
		t.Errorf("dedup as root, from a daemon running as nobody: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// startAs is startOn with the daemon running as uid (and the same gid);
// extra are more flags for annexd.
func startAs(t *testing.T, base string, uid uint32, root string, extra ...string) *daemon {
	t.Helper()
	d := spawn(t, annexdRun{base: base, roots: []string{root}, extra: extra, cred: &syscall.Credential{Uid: uid, Gid: uid},
		env: func(env []string) []string { return append(env, "HOME="+base) }})
	d.waitIdle()
	return d
}

// ctlAs runs annexctl as uid (and the same gid) against d.
func ctlAs(t *testing.T, d *daemon, uid uint32, args ...string) result {
	t.Helper()
	return runCmd(t, bin.annexctl, args, func(cmd *exec.Cmd) {
		cmd.Env = d.env
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	})
}

// Ctrl-C once the plan is printed: the daemon stops after the actions
// under way and annexctl prints what was done, which status agrees with;
// a second run does the rest. (A run that ends before the signal lands
// must still print its result; the test says which it saw.)
func TestDedupInterrupt(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 512 << 20})
	root := fs.Path("home")
	const groups = 150
	var all []string
	for i := range groups {
		for _, dir := range []string{"a", "b"} {
			p := filepath.Join(root, dir, strconv.Itoa(i))
			writeRandom(t, p, uint64(100+i), 512<<10)
			all = append(all, p)
		}
	}
	before := statesOf(t, all)
	d := startOn(t, dedupBase(t, ""), root)

	ctx, cancel := context.WithTimeout(context.Background(), ctlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.annexctl, "dedup")
	cmd.Env = d.env
	var errb strings.Builder
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	first, err := out.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "will free 75.0 MiB: 150 files in 150 groups (reflink)") {
		t.Fatalf("plan line %q, %v; stderr %s", first, err, errb.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	err = cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	m := regexp.MustCompile(`(?m)^(stopped early: )?freed [0-9.]+ [KM]?i?B in (\d+) of 150 files`).FindSubmatch(rest)
	if m == nil {
		t.Fatalf("no result after Ctrl-C: exit %d\n%s%s%s", code, first, rest, errb.String())
	}
	done, _ := strconv.Atoi(string(m[2]))
	stopped := len(m[1]) > 0
	t.Logf("Ctrl-C after the plan: stopped %v, %d of 150 done", stopped, done)
	switch {
	case stopped && (code != 1 || !strings.Contains(errb.String(), "stopping after the actions under way")):
		t.Errorf("a stopped run: exit %d, stderr %q", code, errb.String())
	case !stopped && (code != 0 || done != groups):
		t.Errorf("a run that ended first: exit %d, %d done", code, done)
	}
	if st := dedupStatus(t, d); st.Pairs != int64(done) {
		t.Errorf("status counts %d pairs, annexctl printed %d", st.Pairs, done)
	}
	sameStates(t, "after the interrupted run", before)
	r := d.ctl("", "dedup")
	if left := groups - done; r.code != 0 || (left > 0 && !strings.Contains(r.stdout, fmt.Sprintf("in %d of %d files", left, left))) {
		t.Errorf("the second run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if st := dedupStatus(t, d); st.Pairs != groups {
		t.Errorf("status counts %d pairs after both runs, want %d", st.Pairs, groups)
	}
	sameStates(t, "after the second run", before)
}
