package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
)

// fsAppendFL and fsNoCOWFL are FS_APPEND_FL (chattr +a) and FS_NOCOW_FL
// (chattr +C) of linux/fs.h.
const (
	fsAppendFL = 0x20
	fsNoCOWFL  = 0x00800000
)

// setFlag sets or clears an inode flag of a file or folder; set, it is
// cleared again when the test ends.
func setFlag(t *testing.T, path string, flag int, on bool) {
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
		flags |= flag
		t.Cleanup(func() { setFlag(t, path, flag, false) })
	} else {
		flags &^= flag
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, flags); err != nil {
		t.Fatal(err)
	}
}

// hardlinkTree writes groups of copies (names g<i>/c<j>, of size bytes,
// the first of each group the oldest) under root and returns each name's
// bytes.
func hardlinkTree(t *testing.T, root string, groups, copies, size int) map[string][]byte {
	t.Helper()
	data := map[string][]byte{}
	old := time.Now().Add(-time.Hour)
	for g := range groups {
		for c := range copies {
			p := filepath.Join(root, fmt.Sprintf("g%03d/c%d", g, c))
			writeRandom(t, p, uint64(1000+g), size)
			if c == 0 {
				if err := os.Chtimes(p, old, old); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			data[p] = b
		}
	}
	return data
}

// skipsOf parses "skipped N: reason n, reason n" from dedup's output.
func skipsOf(out string) map[string]int {
	m := regexp.MustCompile(`(?m)^skipped [0-9,]+: (.*)$`).FindStringSubmatch(out)
	got := map[string]int{}
	if m == nil {
		return got
	}
	for _, part := range strings.Split(m[1], ", ") {
		var reason string
		var n int
		if _, err := fmt.Sscanf(part, "%s %d", &reason, &n); err == nil {
			got[reason] = n
		}
	}
	return got
}

// A write seen under a hardlink step's temporary name, of a file gone by
// the time the watcher looked, is not a write of every file: the
// daemon's hardlink run afterwards links every pair. Before, such an
// event marked every file written for ten minutes (the ledger's write of
// unknown inode), and 294 of 300 pairs were skipped as "written".
func TestDedupHardlinkTempNameIsNoWrite(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := fs.Path("home")
	data := hardlinkTree(t, root, 3, 2, 256<<10)
	d := startOn(t, dedupBase(t, ""), root)
	// What the old copy of a relinked file looked like to the watcher: a
	// name made, written and gone before the watcher could stat it.
	for i := range 3 {
		p := filepath.Join(root, fmt.Sprintf("g%03d", i), fmt.Sprintf(".annexd-dedup-%024d", i))
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		f.WriteString("a write to the old copy")
		f.Close()
	}
	d.waitIdle()
	r := d.ctl("", "dedup", "--hardlink")
	if r.code != 0 || !strings.Contains(r.stdout, "in 3 of 3 files") {
		t.Errorf("dedup --hardlink: exit %d\n%s%s\nwant all 3 copies linked", r.code, r.stdout, r.stderr)
	}
	if a := newScribe().verify(t, root, data); a.lost+a.misplaced+len(a.broken) > 0 {
		t.Errorf("after the run: %s", a)
	}
}

// Processes append to copies and keepers while `annexctl dedup --hardlink`
// links them. Every line stays in the file at the name it was written
// through, and nowhere else; the pairs nobody wrote to are all linked;
// no temporary name is left. Before, a writer whose open waited on the
// daemon's lease wrote into the removed old copy (4 of 6 such writes were
// lost), and the watcher's event for that name made the daemon skip
// almost every later pair as "written".
func TestDedupHardlinkWritersRace(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 256 << 20})
	root := fs.Path("home")
	const groups = 40
	data := hardlinkTree(t, root, groups, 2, 2<<20)
	d := startOn(t, dedupBase(t, ""), root)
	s := newScribe()
	// Writers touch the first half of the groups only, as the run
	// reaches them.
	var busy []string
	for name := range data {
		var g int
		fmt.Sscanf(filepath.Base(filepath.Dir(name)), "g%d", &g)
		if g < groups/2 {
			busy = append(busy, name)
		}
	}
	r := ctlWhile(t, d, func(stop <-chan struct{}) { attackSteps(t, s, busy, stop) }, "dedup", "--hardlink")
	t.Logf("dedup --hardlink with %d lines appended meanwhile: exit %d\n%s", s.lines(), r.code, r.stdout)
	done := regexp.MustCompile(`(?m)^freed .* in (\d+) of (\d+) files`).FindStringSubmatch(r.stdout)
	if done == nil || r.stderr != "" {
		t.Fatalf("dedup --hardlink: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var linked int
	fmt.Sscanf(done[1], "%d", &linked)
	if skips := skipsOf(r.stdout); linked < groups/2 || skips["written"] > groups/2 {
		t.Errorf("%d linked, skipped %v: want at least the %d pairs nobody wrote to linked", linked, skips, groups/2)
	}
	for g := groups / 2; g < groups; g++ {
		a, b := filepath.Join(root, fmt.Sprintf("g%03d/c0", g)), filepath.Join(root, fmt.Sprintf("g%03d/c1", g))
		if stateOf(t, a).ino != stateOf(t, b).ino {
			t.Errorf("g%03d, which nobody wrote to, was not linked", g)
		}
	}
	if a := s.verify(t, root, data); a.lost+a.misplaced+a.keptAside+len(a.broken) > 0 {
		t.Errorf("%s", a)
	}
	if left := tempNames(root); len(left) > 0 {
		t.Errorf("temporary names left: %v", left)
	}
}

// The daemon is killed in the middle of `dedup --hardlink`, the user
// appends to every file while it is down, and it starts again. Every line
// is in the file at the name it was written through, and only there, and
// no temporary name is left. Before, a kill right after an exchange made
// recovery exchange the names back once the user had written: the edit of
// the copy then sat in the keeper, and the copy showed its old bytes.
func TestDedupHardlinkKilledWhileUsed(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 256 << 20})
	root := fs.Path("home")
	data := hardlinkTree(t, root, 40, 2, 256<<10)
	base := dedupBase(t, "")
	d := startOn(t, base, root)
	killDuringHardlink(t, d, 80*time.Millisecond)
	inStep := len(tempNames(root))
	s := newScribe()
	for name := range data {
		if err := s.appendLine(name); err != nil {
			t.Errorf("append to %s while the daemon is down: %v", name, err)
		}
	}
	t.Logf("killed after %d of 40 pairs, %d left inside a step", linkedPairs(t, data), inStep)
	d2 := startOn(t, base, root)
	if a := s.verify(t, root, data); a.lost+a.misplaced+len(a.broken) > 0 {
		t.Errorf("after the restart: %s\n%s", a, d2.log)
	}
	if left := tempNames(root); len(left) > 0 {
		t.Errorf("temporary names left after the restart: %v", left)
	}
	if r := d2.ctl("", "dedup", "--hardlink"); r.code > 1 {
		t.Errorf("a run after the restart: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// ctlWhile runs annexctl with args and, once it printed its first line
// (dedup's plan), during until annexctl ends; during must return soon
// after stop is closed.
func ctlWhile(t *testing.T, d *daemon, during func(stop <-chan struct{}), args ...string) result {
	t.Helper()
	cmd := exec.Command(bin.annexctl, args...)
	cmd.Env = d.env
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(out)
	first, _ := rd.ReadString('\n')
	stop := make(chan struct{})
	ended := make(chan struct{})
	go func() { during(stop); close(ended) }()
	rest, _ := io.ReadAll(rd)
	err = cmd.Wait()
	close(stop)
	<-ended
	r := result{stdout: first + string(rest), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("annexctl %v: %v", args, err)
	}
	return r
}

// attackSteps appends lines to names as the run reaches them: the first
// time a process (the daemon, about to compare it) opens one of names, it
// appends to it at once, and again 30 ms later.
func attackSteps(t *testing.T, s *scribe, names []string, stop <-chan struct{}) {
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ifd)
	dirs := map[int]string{}
	for _, n := range names {
		wd, err := unix.InotifyAddWatch(ifd, filepath.Dir(n), unix.IN_OPEN)
		if err != nil {
			t.Fatal(err)
		}
		dirs[wd] = filepath.Dir(n)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	buf := make([]byte, 64<<10)
	for {
		select {
		case <-stop:
			return
		default:
		}
		n, err := unix.Read(ifd, buf)
		if err != nil {
			inotifyWait(ifd)
			continue
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			off += unix.SizeofInotifyEvent + int(ev.Len)
			victim := filepath.Join(dirs[int(ev.Wd)], name)
			if !want[victim] {
				continue
			}
			delete(want, victim)
			wg.Go(func() {
				for _, wait := range []time.Duration{0, 30 * time.Millisecond} {
					time.Sleep(wait)
					if err := s.appendLine(victim); err != nil {
						t.Errorf("writer: %v", err)
					}
				}
			})
		}
	}
}

// inotifyWait waits until the non-blocking inotify descriptor ifd has
// events to read, for up to 10 ms, so that a loop reading it still looks
// at its stop channel. It wakes as an event comes; a sleep of 100 µs
// between reads, before, woke thousands of times a second for the whole
// run.
func inotifyWait(ifd int) {
	_, _ = unix.Poll([]unix.PollFd{{Fd: int32(ifd), Events: unix.POLLIN}}, 10)
}

// killDuringHardlink starts `annexctl dedup --hardlink` and SIGKILLs the
// daemon at a random moment of the run, up to spread after its plan.
func killDuringHardlink(t *testing.T, d *daemon, spread time.Duration) {
	t.Helper()
	cmd := exec.Command(bin.annexctl, "dedup", "--hardlink")
	cmd.Env = d.env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(out).ReadString('\n') // the plan: the run starts now
	time.Sleep(time.Duration(rand.Int64N(int64(spread) + 1)))
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	d.exited = true
	io.Copy(io.Discard, out)
	cmd.Wait()
}

// linkedPairs counts the folders of data whose two names are one inode.
func linkedPairs(t *testing.T, data map[string][]byte) int {
	groups := map[string][]string{}
	for name := range data {
		groups[filepath.Dir(name)] = append(groups[filepath.Dir(name)], name)
	}
	n := 0
	for _, names := range groups {
		if len(names) == 2 && stateOf(t, names[0]).ino == stateOf(t, names[1]).ino {
			n++
		}
	}
	return n
}

// A copy in an append-only folder, an immutable keeper: each pair is
// refused alone, by name, with no temporary name made, and the next run
// on other files is not stopped by them. Before, the append-only folder
// left a temporary name, and every later `dedup --hardlink` exited 1 on
// its recovery ("unlink: operation not permitted").
func TestDedupHardlinkRefusedAlone(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
	root := fs.Path("home")
	data := hardlinkTree(t, root, 4, 2, 256<<10)
	setFlag(t, filepath.Join(root, "g000"), fsAppendFL, true)
	setImmutable(t, filepath.Join(root, "g001/c0"), true)
	t.Cleanup(func() { setImmutable(t, filepath.Join(root, "g001/c0"), false) })
	d := startOn(t, dedupBase(t, ""), root)
	r := d.ctl("", "dedup", "--hardlink", filepath.Join(root, "g000"), filepath.Join(root, "g001"), filepath.Join(root, "g002"))
	if r.code != 1 || !strings.Contains(r.stdout, "in 1 of 3 files") || !strings.Contains(r.stdout, "skipped 2: refused 2") ||
		!strings.Contains(r.stdout, "append-only (chattr +a)") || !strings.Contains(r.stdout, "immutable (chattr +i)") {
		t.Errorf("dedup --hardlink: exit %d\n%s%s\nwant g002 linked, g000 and g001 refused with the reason", r.code, r.stdout, r.stderr)
	}
	if left := tempNames(root); len(left) > 0 {
		t.Errorf("temporary names left: %v", left)
	}
	r = d.ctl("", "dedup", "--hardlink", filepath.Join(root, "g003"))
	if r.code != 0 || !strings.Contains(r.stdout, "in 1 of 1 file") {
		t.Errorf("the next run, on g003: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if a := newScribe().verify(t, root, data); a.lost+a.misplaced+len(a.broken) > 0 {
		t.Errorf("%s", a)
	}
}

// A git-annex repository with annex.thin keeps each unlocked file as a
// hard link of its object. `dedup --hardlink` never links a copy to such
// a file, with the default ignores (the object is not indexed) or with
// [ignore] annex_objects (it is): an edit of the copy would rewrite the
// object. Before, the keeper's other links were never looked at.
func TestDedupHardlinkAnnexThin(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, conf string }{{"default ignores", ""}, {"annex_objects", "[ignore]\nannex_objects = true\n"}} {
		conf := c.conf
		t.Run(c.name, func(t *testing.T) {
			fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 64 << 20})
			root := fs.Path("home")
			repo := filepath.Join(root, "repo")
			git := func(args ...string) {
				t.Helper()
				cmd := exec.Command("git", args...)
				cmd.Dir, cmd.Env = repo, gitEnv()
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("git %v: %v\n%s", args, err, out)
				}
			}
			if err := os.MkdirAll(repo, 0o755); err != nil {
				t.Fatal(err)
			}
			git("init", "-q")
			git("config", "user.email", "e2e@annexd.invalid")
			git("config", "user.name", "e2e")
			git("annex", "init", "-q")
			git("config", "annex.thin", "true")
			git("config", "annex.addunlocked", "true")
			file, cp := filepath.Join(repo, "photo.raw"), filepath.Join(root, "copy/photo.raw")
			writeRandom(t, file, 77, 1<<20)
			git("annex", "add", "-q", "photo.raw")
			var st unix.Stat_t
			if err := unix.Lstat(file, &st); err != nil || st.Nlink != 2 {
				t.Fatalf("annex.thin did not hard-link the file to its object: %d links, %v", st.Nlink, err)
			}
			writeRandom(t, cp, 77, 1<<20) // newer: the repository's file is the keeper
			d := startOn(t, dedupBase(t, conf), root)
			r := d.ctl("", "dedup", "--hardlink")
			if r.code != 1 || !strings.Contains(r.stdout, "links-elsewhere") || !strings.Contains(r.stdout, "git-annex object") {
				t.Errorf("dedup --hardlink: exit %d\n%s%s\nwant the copy skipped: the keeper has a link elsewhere", r.code, r.stdout, r.stderr)
			}
			if stateOf(t, cp).ino == st.Ino {
				t.Fatal("the copy was linked to the annex's object")
			}
			write(t, cp, "edited")
			git("annex", "fsck", "-q", "photo.raw")
		})
	}
}

// In the background, on btrfs, a copy in a nodatacow folder (chattr +C)
// cannot share its keeper's extents: the kernel refuses that pair alone.
// It is counted and logged as refused, and copies made later on the same
// file system are still deduplicated. Before, the first such refusal
// left the whole file system alone until a restart ("skipped
// {unsupported:1}, pending 0"), with nothing logged.
func TestDedupContinuousRefusedPair(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Btrfs, loopfs.Options{Size: loopfs.MinSize[loopfs.Btrfs]})
	root := fs.Path("home")
	if err := os.MkdirAll(filepath.Join(root, "nocow"), 0o755); err != nil {
		t.Fatal(err)
	}
	setFlag(t, filepath.Join(root, "nocow"), fsNoCOWFL, true)
	writeRandom(t, filepath.Join(root, "a.bin"), 9, 1<<20)
	writeRandom(t, filepath.Join(root, "nocow/a.bin"), 9, 1<<20)
	conf := "[dedup]\ncontinuous = true\nquiet = \"1s\"\ninterval = \"200ms\"\nmax_load = -1.0\nignore_battery = true\n"
	d := startOn(t, dedupBase(t, conf), root)
	deadline := time.Now().Add(time.Minute)
	for st := dedupStatus(t, d); st.Skipped["refused"] < 1; st = dedupStatus(t, d) {
		if time.Now().After(deadline) {
			t.Fatalf("the nodatacow pair was not refused within a minute: %+v\n%s", st, d.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !d.waitLog("reason=refused") {
		t.Errorf("the refused pair was not logged:\n%s", d.log)
	}
	later := []string{filepath.Join(root, "x/b.bin"), filepath.Join(root, "y/b.bin")}
	for _, p := range later {
		writeRandom(t, p, 10, 2<<20)
	}
	before := statesOf(t, later)
	for st := dedupStatus(t, d); st.Pairs < 1; st = dedupStatus(t, d) {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("the later pair was not deduplicated: %+v\n%s", st, d.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sameStates(t, "after the background pass", before)
}
