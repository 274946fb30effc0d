//go:build powercut

// Package powercut cuts the power under a running annexd and checks that no
// key it reports afterwards is wrong; TestMachineLife (lifecycle_test.go)
// puts it through reboots that renumber devices and remounts. It needs
// root, loop devices, mkfs.xfs, mkfs.ext4, mkfs.btrfs and xfs_io, so it is
// built only with -tags powercut (.ci/run runs it; RELIABILITY.md has its
// figures):
//
//	go test -tags powercut -v ./e2e/powercut/ [-runs 5] [-files 200]
//
// Each run makes a fresh loop-mounted file system holding the tree, lets the
// daemon index it, rewrites every file in place with the same size (half of
// them with the mtime put back), waits until the daemon has hashed the new
// bytes, has another program fsync an unrelated file (which commits the
// journal holding the new timestamps but not the overwritten data), shuts
// the file system down with `xfs_io -x -c shutdown` (no log flush: what a
// power cut leaves), ends the daemon, unmounts, mounts (journal recovery),
// restarts the daemon on the same index and compares `annexctl lookup` of
// every file with the SHA-256 of its bytes on disk.
package powercut

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/internal/testutil"
)

var (
	runsFlag  = flag.Int("runs", 3, "power cuts per file system and configuration")
	filesFlag = flag.Int("files", 200, "files in each tree")
)

// bin holds the binaries built once for all runs.
var bin struct{ annexd, annexctl string }

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "powercut: these tests mount loop devices and must run as root (CI does)")
		return 1
	}
	for _, prog := range []string{"mkfs.xfs", "mkfs.ext4", "xfs_io", "mount", "umount"} {
		if _, err := exec.LookPath(prog); err != nil {
			fmt.Fprintf(os.Stderr, "powercut: %s is needed (apt-get install xfsprogs e2fsprogs mount): %v\n", prog, err)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "annexd-powercut-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin.annexd, bin.annexctl = filepath.Join(dir, "annexd"), filepath.Join(dir, "annexctl")
	for _, b := range []struct{ out, pkg string }{{bin.annexd, "./cmd/annexd"}, {bin.annexctl, "./cmd/annexctl"}} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "powercut: build %s: %v\n%s", b.pkg, err, out)
			return 1
		}
	}
	return m.Run()
}

// ending is how the daemon ends after the power cut.
type ending int

const (
	killed   ending = iota // SIGKILL: the index records no clean shutdown
	survived               // SIGTERM: the daemon outlived its tree's file system and closed cleanly
)

func (e ending) String() string { return [...]string{"killed", "survived"}[e] }

// config is one way of running the scenario.
type config struct {
	fs     string // "xfs" or "ext4"
	sameFS bool   // the index lives on the file system that loses power
	end    ending
	// noSync runs the daemon with --no-data-sync: it hashes recent files
	// without making their data durable, which leaves only the re-check
	// after an unclean end as a defence.
	noSync bool
	// control: no defence is left (no sync, and the daemon outlived the
	// file system and closed the index cleanly), so wrong keys are
	// expected; finding none would mean the test cannot see the bug.
	control bool
}

func (c config) name() string {
	where := "index-elsewhere"
	if c.sameFS {
		where = "index-on-tree-fs"
	}
	sync := "sync"
	if c.noSync {
		sync = "no-data-sync"
	}
	return fmt.Sprintf("%s/%s/daemon-%s/%s", c.fs, where, c.end, sync)
}

// tally counts what the runs of one config found.
type tally struct {
	runs, files, lost, wrong, unanswered int
}

func (t *tally) add(o tally) {
	t.runs += o.runs
	t.files += o.files
	t.lost += o.lost
	t.wrong += o.wrong
	t.unanswered += o.unanswered
}

func configs() []config {
	var cs []config
	for _, fs := range []string{"xfs", "ext4"} {
		cs = append(cs,
			config{fs: fs, end: killed},
			config{fs: fs, end: survived},
			config{fs: fs, sameFS: true, end: killed},
			config{fs: fs, end: killed, noSync: true},
			config{fs: fs, sameFS: true, end: killed, noSync: true},
			config{fs: fs, end: survived, noSync: true, control: true},
		)
	}
	return cs
}

func TestPowerCut(t *testing.T) {
	var summary []string
	for _, c := range configs() {
		var sum tally
		t.Run(c.name(), func(t *testing.T) {
			for i := range *runsFlag {
				got := powerCut(t, c, uint64(i))
				t.Logf("run %d: %d files, %d writes lost by the cut, %d wrong keys, %d without a key",
					i+1, got.files, got.lost, got.wrong, got.unanswered)
				sum.add(got)
			}
			switch {
			case c.noSync && sum.lost == 0:
				// With the sync, the daemon saves the bytes it hashed.
				t.Errorf("no write was lost in %d runs: the scenario did not cut the power before writeback", sum.runs)
			case c.control && sum.wrong == 0:
				t.Errorf("no wrong key in %d runs without any defence: the test cannot see the failure it is for", sum.runs)
			case !c.control && sum.wrong > 0:
				t.Errorf("%d wrong keys reported current over %d runs", sum.wrong, sum.runs)
			}
			if sum.unanswered > 0 {
				t.Errorf("%d lookups without a key after the daemon was idle", sum.unanswered)
			}
		})
		summary = append(summary, fmt.Sprintf("%-52s runs %2d  files %5d  writes lost %5d  wrong keys %4d  without a key %4d",
			c.name(), sum.runs, sum.files, sum.lost, sum.wrong, sum.unanswered))
	}
	t.Logf("summary:\n%s", strings.Join(summary, "\n"))
}

// powerCut runs the scenario once and counts what it found.
func powerCut(t *testing.T, c config, seed uint64) tally {
	base := tempBase(t)
	img := newImage(t, c.fs)
	root := filepath.Join(img.Dir, "tree")
	paths := writeTree(t, root, *filesFlag, seed, 128<<10)
	syncDir(t, img.Dir) // the first content is durable: these are the "old bytes"

	index := filepath.Join(base, "state", "index.db")
	if c.sameFS {
		index = filepath.Join(img.Dir, "state", "index.db")
	}
	var args []string
	if c.noSync {
		args = append(args, "--no-data-sync")
	}
	d := startDaemon(t, base, index, root, args)
	d.waitIdle()
	if bad := d.wrongKeys(paths, digests(t, paths)); bad.wrong+bad.unanswered != 0 {
		t.Fatalf("first index: %d wrong keys, %d without a key\n%s", bad.wrong, bad.unanswered, d.log)
	}

	rewrite(t, paths, seed)
	fresh := digests(t, paths) // the new bytes, as the page cache holds them
	d.waitIdle()
	if bad := d.wrongKeys(paths, fresh); bad.wrong+bad.unanswered != 0 {
		t.Fatalf("after the rewrite, before the cut: %d wrong keys, %d without a key\n%s", bad.wrong, bad.unanswered, d.log)
	}
	otherFsync(t, img.Dir)
	img.Shutdown(t)
	switch c.end {
	case killed:
		d.kill()
	case survived:
		d.stop()
	}
	img.Unmount(t)
	img.Mount(t)

	onDisk := digests(t, paths)
	got := tally{runs: 1, files: len(paths)}
	for i := range paths {
		if !bytes.Equal(onDisk[i], fresh[i]) {
			got.lost++
		}
	}
	d = startDaemon(t, base, index, root, args)
	d.waitIdle()
	bad := d.wrongKeys(paths, onDisk)
	got.wrong, got.unanswered = bad.wrong, bad.unanswered
	d.stop()
	return got
}

// tempBase is a fresh directory for one run's index, socket and daemon
// state, with a short name, as a socket's path must be. Like the images,
// it is under $TMPDIR, where .ci/run looks for what a killed run left.
func tempBase(t testing.TB) string {
	t.Helper()
	base, err := os.MkdirTemp("", "annexd-powercut-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	return base
}

// newImage mounts a fresh 512 MiB image of the file system fs (internal/loopfs).
func newImage(t testing.TB, fs string) *loopfs.FS {
	t.Helper()
	return loopfs.New(t, loopfs.Kind(fs), loopfs.Options{Size: 512 << 20})
}

// syncDir writes everything cached for the file system holding dir.
func syncDir(t testing.TB, dir string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		t.Fatalf("syncfs %s: %v", dir, err)
	}
}

// otherFsync is any other program on the machine calling fsync on its own
// file: it commits the file system's journal, and with it the timestamps
// of the rewritten files, but not their overwritten data blocks.
func otherFsync(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "other-program.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("unrelated\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// writeTree writes n files of 1 KiB up to maxSize under root in a few
// directories and returns their paths.
func writeTree(t testing.TB, root string, n int, seed uint64, maxSize int) []string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	var paths []string
	for i := range n {
		p := filepath.Join(root, fmt.Sprintf("d%d", i%8), fmt.Sprintf("f%04d.bin", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 1<<10+r.IntN(maxSize-1<<10))
		fill(r, data)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

func fill(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// rewrite overwrites every file in place with new bytes of the same size,
// without fsync; every other file gets its mtime put back, so that only its
// ctime tells.
func rewrite(t *testing.T, paths []string, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 2))
	waitClockTick(t, filepath.Dir(paths[0]))
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, fi.Size())
		fill(r, data)
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// waitClockTick waits until the file system's timestamp clock has moved
// past the newest ctime in dir, so that every rewrite gets a new ctime.
func waitClockTick(t *testing.T, dir string) {
	t.Helper()
	probe := filepath.Join(dir, ".tick")
	defer os.Remove(probe)
	start := time.Now().UnixNano()
	for range 1000 {
		if err := os.WriteFile(probe, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(probe, &st); err != nil {
			t.Fatal(err)
		}
		if st.Ctim.Nano() > start {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the file system clock did not move in a second")
}

func digests(t *testing.T, paths []string) [][]byte {
	t.Helper()
	out := make([][]byte, len(paths))
	for i, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		out[i] = sum[:]
	}
	return out
}

// daemon is a running annexd.
type daemon struct {
	t    *testing.T
	env  []string
	cmd  *exec.Cmd
	log  *testutil.Buffer
	done chan error
	over bool
}

func startDaemon(t *testing.T, base, index, root string, extra []string) *daemon {
	t.Helper()
	socket := filepath.Join(base, "run", "annexd.sock")
	d := &daemon{t: t, log: new(testutil.Buffer), done: make(chan error, 1)}
	d.env = append(os.Environ(),
		"XDG_CONFIG_HOME="+filepath.Join(base, "config"),
		"XDG_STATE_HOME="+filepath.Join(base, "xdgstate"),
		"XDG_RUNTIME_DIR="+filepath.Join(base, "xdgrun"),
		"ANNEXD_SOCKET="+socket)
	args := append([]string{"--socket", socket, "--index", index, "--calibrate", "never",
		"--quiet-delay", "100ms", "--log-level", "debug"}, extra...)
	d.cmd = exec.Command(bin.annexd, append(args, root)...)
	d.cmd.Env = d.env
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(d.kill)
	return d
}

// waitIdle waits until annexctl status --wait succeeds, up to two minutes.
func (d *daemon) waitIdle() {
	d.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, out := d.ctl("", "status", "--wait", "--timeout", "1m")
		if code == 0 {
			return
		}
		select {
		case err := <-d.done:
			d.over = true
			d.t.Fatalf("annexd exited: %v\n%s", err, d.log)
		default:
		}
		if (code != 1 && code != 3) || time.Now().After(deadline) {
			d.t.Fatalf("status --wait: exit %d\n%s\ndaemon log:\n%s", code, out, d.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill ends the daemon with SIGKILL: no clean shutdown.
func (d *daemon) kill() {
	if d.over {
		return
	}
	d.over = true
	d.cmd.Process.Kill()
	<-d.done
}

// stop ends the daemon with SIGTERM and expects it to exit within a minute.
func (d *daemon) stop() {
	d.t.Helper()
	if d.over {
		return
	}
	d.over = true
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		d.cmd.Process.Kill()
		<-d.done
		d.t.Errorf("annexd did not exit within a minute of SIGTERM\n%s", d.log)
	}
}

// ctl runs annexctl with stdin and returns its exit status and output.
func (d *daemon) ctl(stdin string, args ...string) (int, string) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.annexctl, args...)
	cmd.Env = d.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		d.t.Fatalf("annexctl %v did not finish in 3 minutes\n%s%s", args, out.String(), errb.String())
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String() + errb.String()
	case err != nil:
		d.t.Fatalf("annexctl %v: %v", args, err)
	}
	return 0, out.String() + errb.String()
}

// wrongKeys looks every path up and counts the keys whose digest is not
// want's, and the paths without a key.
func (d *daemon) wrongKeys(paths []string, want [][]byte) tally {
	d.t.Helper()
	_, out := d.ctl(strings.Join(paths, "\n")+"\n", "lookup", "--batch")
	lines := strings.Split(out, "\n")
	if len(lines) < len(paths) {
		d.t.Fatalf("lookup --batch: %d lines for %d paths:\n%s", len(lines), len(paths), out)
	}
	var got tally
	for i := range paths {
		k := lines[i]
		_, digest, ok := strings.Cut(k, "--")
		if !ok {
			got.unanswered++
			continue
		}
		digest, _, _ = strings.Cut(digest, ".")
		if digest != hex.EncodeToString(want[i]) {
			if got.wrong++; got.wrong <= 3 {
				d.t.Logf("wrong key %s for %s (content %x)", k, paths[i], want[i])
			}
		}
	}
	return got
}

// BenchmarkFirstIndex is the first index of a tree of 4,000 files written
// just before the daemon starts (fresh: every file is dirty in the page
// cache) or 11 s before (aged: older than the hasher's 10 s cover margin,
// still within its data window), on a fresh loop-mounted file system,
// start to idle, with the data of recent files made durable before their
// keys are recorded (sync) and without (nosync, --no-data-sync); and, as
// the floor of any way of batching the sync, without it and then one
// syncfs(2) of the whole file system (nosync+syncfs). The index lives on
// another file system.
//
//	go test -tags powercut -run XXX -bench FirstIndex -benchtime 3x ./e2e/powercut/
func BenchmarkFirstIndex(b *testing.B) {
	const n = 4000
	for _, fs := range []string{"xfs", "ext4"} {
		for _, age := range []string{"fresh", "aged"} {
			for _, mode := range []string{"sync", "nosync", "nosync+syncfs"} {
				b.Run(fs+"/"+age+"/"+mode, func(b *testing.B) {
					var files int
					for i := 0; i < b.N; i++ {
						files += firstIndex(b, fs, age == "aged", mode, n, uint64(i))
					}
					b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(files), "µs/file")
				})
			}
		}
	}
}

// firstIndex times one first index (the benchmark's timer runs only while
// the daemon does) and returns the number of files.
func firstIndex(b *testing.B, fs string, aged bool, mode string, n int, seed uint64) int {
	b.StopTimer()
	base := tempBase(b)
	img := newImage(b, fs)
	root := filepath.Join(img.Dir, "tree")
	files := len(writeTree(b, root, n, seed, 32<<10))
	args := []string{"--index", filepath.Join(base, "state", "index.db"), "--socket", filepath.Join(base, "run", "s"),
		"--calibrate", "never", "--exit-when-idle"}
	if mode != "sync" {
		args = append(args, "--no-data-sync")
	}
	if aged {
		time.Sleep(11 * time.Second)
	}
	cmd := exec.Command(bin.annexd, append(args, root)...)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(base, "config"))
	b.StartTimer()
	out, err := cmd.CombinedOutput()
	if err == nil && mode == "nosync+syncfs" {
		syncDir(b, img.Dir)
	}
	b.StopTimer()
	if err != nil {
		b.Fatalf("annexd: %v\n%s", err, out)
	}
	return files
}
