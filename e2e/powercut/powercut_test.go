//go:build powercut

// Package powercut cuts the power under a running annexd and checks that no
// key it reports afterwards is wrong. It needs root, loop devices, mkfs.xfs,
// mkfs.ext4 and xfs_io, so it is built only with -tags powercut (.ci/run
// runs it; RELIABILITY.md has its figures):
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
	fs        string // "xfs" or "ext4"
	sameFS    bool   // the index lives on the file system that loses power
	end       ending
	daemonArg []string // extra annexd flags
}

func (c config) name() string {
	where := "index-elsewhere"
	if c.sameFS {
		where = "index-on-tree-fs"
	}
	return fmt.Sprintf("%s/%s/daemon-%s", c.fs, where, c.end)
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
			if sum.lost == 0 {
				t.Errorf("no write was lost in %d runs: the scenario did not cut the power before writeback", sum.runs)
			}
			if sum.wrong > 0 {
				t.Errorf("%d wrong keys reported current over %d runs", sum.wrong, sum.runs)
			}
		})
		summary = append(summary, fmt.Sprintf("%-40s runs %2d  files %5d  writes lost %5d  wrong keys %4d  without a key %4d",
			c.name(), sum.runs, sum.files, sum.lost, sum.wrong, sum.unanswered))
	}
	t.Logf("summary:\n%s", strings.Join(summary, "\n"))
}

// powerCut runs the scenario once and counts what it found.
func powerCut(t *testing.T, c config, seed uint64) tally {
	base := tempBase(t)
	img := newImage(t, base, c.fs)
	img.mount(t)
	root := filepath.Join(img.mnt, "tree")
	paths := writeTree(t, root, *filesFlag, seed)
	img.syncfs(t) // the first content is durable: these are the "old bytes"

	index := filepath.Join(base, "state", "index.db")
	if c.sameFS {
		index = filepath.Join(img.mnt, "state", "index.db")
	}
	d := startDaemon(t, base, index, root, c.daemonArg)
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
	img.otherFsync(t)
	img.shutdown(t)
	switch c.end {
	case killed:
		d.kill()
	case survived:
		d.stop()
	}
	img.unmount(t)
	img.mount(t)

	onDisk := digests(t, paths)
	got := tally{runs: 1, files: len(paths)}
	for i := range paths {
		if !bytes.Equal(onDisk[i], fresh[i]) {
			got.lost++
		}
	}
	d = startDaemon(t, base, index, root, c.daemonArg)
	d.waitIdle()
	bad := d.wrongKeys(paths, onDisk)
	got.wrong, got.unanswered = bad.wrong, bad.unanswered
	d.stop()
	img.unmount(t)
	return got
}

// tempBase is a fresh directory for one run; its name starts with
// annexd-powercut- so that .ci/run can find what a killed test left mounted.
func tempBase(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "annexd-powercut-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	return base
}

// image is a loop-mounted file system in a sparse file.
type image struct {
	fs, file, mnt string
	mounted       bool
}

func newImage(t *testing.T, base, fs string) *image {
	t.Helper()
	img := &image{fs: fs, file: filepath.Join(base, fs+".img"), mnt: filepath.Join(base, "mnt")}
	if err := os.Mkdir(img.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img.file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img.file, 512<<20); err != nil {
		t.Fatal(err)
	}
	switch fs {
	case "xfs":
		run(t, "mkfs.xfs", "-q", "-f", img.file)
	case "ext4":
		run(t, "mkfs.ext4", "-q", "-F", img.file)
	default:
		t.Fatalf("unknown file system %q", fs)
	}
	t.Cleanup(func() {
		if img.mounted {
			// A test that failed midway: lazily, so a busy mount cannot
			// keep its loop device (mount -o loop frees it at unmount).
			if err := unix.Unmount(img.mnt, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", img.mnt, err)
			}
		}
	})
	return img
}

func (img *image) mount(t *testing.T) {
	t.Helper()
	run(t, "mount", "-t", img.fs, "-o", "loop", img.file, img.mnt)
	img.mounted = true
}

func (img *image) unmount(t *testing.T) {
	t.Helper()
	run(t, "umount", img.mnt)
	img.mounted = false
}

func (img *image) syncfs(t *testing.T) {
	t.Helper()
	fd, err := unix.Open(img.mnt, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		t.Fatalf("syncfs %s: %v", img.mnt, err)
	}
}

// otherFsync is any other program on the machine calling fsync on its own
// file: it commits the file system's journal, and with it the timestamps
// of the rewritten files, but not their overwritten data blocks.
func (img *image) otherFsync(t *testing.T) {
	t.Helper()
	f, err := os.Create(filepath.Join(img.mnt, "other-program.log"))
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

// shutdown cuts the power: the file system stops at once, without flushing
// its log (xfs_io's default; ext4 takes the same ioctl).
func (img *image) shutdown(t *testing.T) {
	t.Helper()
	run(t, "xfs_io", "-x", "-c", "shutdown", img.mnt)
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// writeTree writes n files of 1 KiB to 128 KiB under root in a few
// directories and returns their paths.
func writeTree(t *testing.T, root string, n int, seed uint64) []string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	var paths []string
	for i := range n {
		p := filepath.Join(root, fmt.Sprintf("d%d", i%8), fmt.Sprintf("f%04d.bin", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 1<<10+r.IntN(127<<10))
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
