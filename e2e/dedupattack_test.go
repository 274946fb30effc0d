//go:build dedupattack

// The deduplication attack: the real daemon and `annexctl dedup --hardlink`
// on loop-mounted images, with other processes writing, chmodding and
// linking the files as the run reaches them, the daemon killed mid-run
// while files are appended to (and folders renamed, or the file system
// brought back on another device number, while it is down), folders made
// append-only, keepers immutable, git-annex objects beside the copies, and
// pairs the kernel refuses in the background. It needs root, loop devices,
// mkfs.ext4, mkfs.btrfs, losetup and git-annex, so it is built only with
// -tags dedupattack (RELIABILITY.md has its figures):
//
//	go test -tags dedupattack -run TestDedupAttack -v ./e2e/ [-attack.runs 3] [-attack.pairs 300]
//
// Each scenario prints one line of figures; every one must show nothing
// lost, misplaced or left behind.
package e2e

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
)

var (
	attackRuns  = flag.Int("attack.runs", 3, "runs of each scenario")
	attackPairs = flag.Int("attack.pairs", 300, "pairs of copies in each run")
)

// TestDedupHardlinkCost times one `dedup --hardlink` of attack.pairs pairs
// of 256 KiB copies that nobody touches: what the checks and the grace
// cost, beside the same test on older code.
func TestDedupHardlinkCost(t *testing.T) {
	t.Parallel()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 1 << 30})
	root := fs.Path("home")
	hardlinkTree(t, root, *attackPairs, 2, 256<<10)
	d := startOn(t, dedupBase(t, ""), root)
	start := time.Now()
	r := d.ctl("", "dedup", "--hardlink")
	secs := time.Since(start).Seconds()
	if r.code != 0 {
		t.Fatalf("dedup --hardlink: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("FIGURES cost: pairs %d; seconds %.2f", *attackPairs, secs)
}

func TestDedupAttack(t *testing.T) {
	t.Parallel()
	t.Run("writers", func(t *testing.T) { repeat(t, attackWriters) })
	t.Run("kills", func(t *testing.T) { repeat(t, attackKills) })
	t.Run("refusals", func(t *testing.T) { repeat(t, attackRefusals) })
	t.Run("annex", func(t *testing.T) { repeat(t, attackAnnex) })
	t.Run("background", func(t *testing.T) { repeat(t, attackBackground) })
}

// figures add up what the runs of one scenario saw.
type figures map[string]int

func (f figures) String() string {
	var b strings.Builder
	keys := slices.Sorted(maps.Keys(f))
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %d; ", k, f[k])
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// repeat runs one scenario attackRuns times and logs the sums.
func repeat(t *testing.T, run func(t *testing.T, f figures)) {
	f := figures{}
	for i := range *attackRuns {
		t.Run(fmt.Sprint(i), func(t *testing.T) { run(t, f) })
		f["runs"]++
	}
	must := map[string][]string{
		"writers":    {"lost", "misplaced", "modes lost", "links broken", "untouched pairs not linked", "temp names left"},
		"kills":      {"lost", "misplaced", "temp names left"},
		"refusals":   {"lost", "pairs stopped by another's refusal", "temp names left"},
		"annex":      {"copies linked to an annex object"},
		"background": {"later pairs not shared"},
	}[filepath.Base(t.Name())]
	for _, k := range must {
		f[k] += 0 // shown when 0 too
	}
	t.Logf("FIGURES %s: %s", t.Name(), f)
	for _, k := range must {
		if f[k] > 0 {
			t.Errorf("%s: %d", k, f[k])
		}
	}
}

// attackWriters: as the run opens each busy file to compare it, another
// process looks its name up and, up to 20 ms later, appends to it through
// its name or through what it looked up (a process that resolved the name
// just before the exchange and opens the file just after), chmods it, or
// links it; a third of the pairs nobody touches.
func attackWriters(t *testing.T, f figures) {
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 1 << 30})
	root := fs.Path("home")
	pairs := *attackPairs
	data := hardlinkTree(t, root, pairs, 2, 512<<10)
	d := startOn(t, dedupBase(t, ""), root)
	s := newScribe()
	var busy []string
	for name := range data {
		var g int
		fmt.Sscanf(filepath.Base(filepath.Dir(name)), "g%d", &g)
		if g%3 != 2 {
			busy = append(busy, name)
		}
	}
	m := newMeddler(t, s, busy)
	r := ctlWhile(t, d, func(stop <-chan struct{}) { m.attack(t, stop) }, "dedup", "--hardlink")
	done := regexp.MustCompile(`(?m)^freed .* in (\d+) of (\d+) files`).FindStringSubmatch(r.stdout)
	if done == nil {
		t.Fatalf("dedup --hardlink: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var linked int
	fmt.Sscanf(done[1], "%d", &linked)
	f["pairs"] += pairs
	f["pairs linked"] += linked
	skips := skipsOf(r.stdout)
	for reason, n := range skips {
		f["skipped "+reason] += n
	}
	f["races won by the writer"] += skips["raced"] + skips["open-for-writing"] + skips["in-use"]
	for g := 2; g < pairs; g += 3 {
		a, b := filepath.Join(root, fmt.Sprintf("g%03d/c0", g)), filepath.Join(root, fmt.Sprintf("g%03d/c1", g))
		if stateOf(t, a).ino != stateOf(t, b).ino {
			f["untouched pairs not linked"]++
		}
	}
	a := s.verify(t, root, data)
	late := m.lostLate(a.lostLines)
	f["lines written"] += s.lines()
	f["lines through a looked-up file"] += m.handleLines
	f["lost"] += a.lost - late + len(a.broken)
	f["lost, opened more than 50 ms after the look-up"] += late
	f["misplaced"] += a.misplaced
	f["kept aside"] += a.keptAside
	f["chmods"] += m.chmods
	f["links made"] += len(m.links)
	modesLost, modesKept := m.modesLost(t)
	linksBroken, linksKept := m.linksBroken(t)
	f["modes lost"] += modesLost
	f["links broken"] += linksBroken
	f["kept aside"] += modesKept + linksKept
	f["temp names left"] += len(tempNames(root))
	if a.lost-late+a.misplaced > 0 {
		t.Errorf("%s\n%s", a, r.stdout)
	}
}

// meddler is the other processes of attackWriters.
type meddler struct {
	s           *scribe
	ifd         int
	dirs        map[int]string
	want        map[string]bool
	mu          sync.Mutex
	modes       map[string][]modeSet // name → the chmods made through it
	links       map[string]string    // new name → the name it was linked from
	ages        map[string]time.Duration
	seq         int
	chmods      int
	handleLines int
}

type modeSet struct {
	seq  int
	mode os.FileMode
}

// newMeddler watches the folders of names for opens, before the run.
func newMeddler(t *testing.T, s *scribe, names []string) *meddler {
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(ifd) })
	m := &meddler{s: s, ifd: ifd, dirs: map[int]string{}, want: map[string]bool{}, modes: map[string][]modeSet{},
		links: map[string]string{}, ages: map[string]time.Duration{}}
	for _, n := range names {
		wd, err := unix.InotifyAddWatch(ifd, filepath.Dir(n), unix.IN_OPEN)
		if err != nil {
			t.Fatal(err)
		}
		m.dirs[wd] = filepath.Dir(n)
		m.want[n] = true
	}
	return m
}

// attack drops the opens of the plan, then, the first time a process
// (the run, about to compare it) opens one of the names, looks the name
// up at once and meddles with it up to 20 ms later.
func (m *meddler) attack(t *testing.T, stop <-chan struct{}) {
	buf := make([]byte, 256<<10)
	for {
		if _, err := unix.Read(m.ifd, buf); err != nil {
			break
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	rnd := rand.New(rand.NewPCG(11, uint64(time.Now().UnixNano())))
	for {
		select {
		case <-stop:
			return
		default:
		}
		n, err := unix.Read(m.ifd, buf)
		if err != nil {
			inotifyWait(m.ifd)
			continue
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			off += unix.SizeofInotifyEvent + int(ev.Len)
			victim := filepath.Join(m.dirs[int(ev.Wd)], name)
			if !m.want[victim] {
				continue
			}
			delete(m.want, victim)
			h, err := unix.Open(victim, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Errorf("look up %s: %v", victim, err)
				continue
			}
			looked, what, delay := time.Now(), rnd.IntN(4), time.Duration(rnd.IntN(20_000))*time.Microsecond
			wg.Go(func() {
				defer unix.Close(h)
				time.Sleep(delay)
				m.meddle(t, victim, fmt.Sprintf("/proc/self/fd/%d", h), looked, what)
			})
		}
	}
}

// meddle does one thing to the file at name: append a line through its
// name or through what was looked up (handle), chmod it, or link it.
func (m *meddler) meddle(t *testing.T, name, handle string, looked time.Time, what int) {
	switch what {
	case 0:
		if err := m.s.appendLine(name); err != nil {
			t.Errorf("append: %v", err)
		}
	case 1:
		age := time.Since(looked)
		line, err := m.s.appendThrough(handle, name)
		if err != nil {
			t.Errorf("append through a looked-up file: %v", err)
			return
		}
		m.mu.Lock()
		m.handleLines++
		m.ages[name+": "+strings.TrimSpace(line)] = age
		m.mu.Unlock()
	case 2:
		m.mu.Lock()
		defer m.mu.Unlock()
		m.seq++
		mode := os.FileMode(0o600 | (m.seq%7)<<3)
		if err := os.Chmod(name, mode); err != nil {
			t.Errorf("chmod: %v", err)
			return
		}
		m.modes[name] = append(m.modes[name], modeSet{m.seq, mode})
		m.chmods++
	case 3:
		link := name + ".link"
		if err := os.Link(name, link); err != nil {
			t.Errorf("link: %v", err)
			return
		}
		m.mu.Lock()
		m.links[link] = name
		m.mu.Unlock()
	}
}

// lostLate counts the lost lines that were appended through a looked-up
// file opened more than the daemon's grace (50 ms) after the look-up:
// the one case hardlink mode says it cannot serve.
func (m *meddler) lostLate(lost []string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, l := range lost {
		if m.ages[l] > 50*time.Millisecond {
			n++
		}
	}
	return n
}

// modesLost counts the files whose mode is not the last one set through
// any of their names, and those whose mode went with an old copy kept
// beside the name.
func (m *meddler) modesLost(t *testing.T) (lost, kept int) {
	byIno := map[uint64]modeSet{}
	for name, sets := range m.modes {
		ino := stateOf(t, name).ino
		last := sets[len(sets)-1]
		if last.seq > byIno[ino].seq {
			byIno[ino] = last
		}
	}
	for name, sets := range m.modes {
		fi, err := os.Lstat(name)
		switch {
		case err == nil && fi.Mode().Perm() == byIno[stateOf(t, name).ino].mode:
		case keptWith(name, func(p string) bool {
			fi, err := os.Lstat(p)
			return err == nil && fi.Mode().Perm() == sets[len(sets)-1].mode
		}):
			kept++
		default:
			lost++
		}
	}
	return lost, kept
}

// linksBroken counts the links made that no longer name the file their
// source names, and those that went with an old copy kept beside it.
func (m *meddler) linksBroken(t *testing.T) (broken, kept int) {
	for link, src := range m.links {
		ino := stateOf(t, link).ino
		switch {
		case ino == stateOf(t, src).ino:
		case keptWith(src, func(p string) bool { return stateOf(t, p).ino == ino }):
			kept++
		default:
			broken++
		}
	}
	return broken, kept
}

// keptWith reports whether an old copy kept beside name satisfies ok.
func keptWith(name string, ok func(path string) bool) bool {
	kept, _ := filepath.Glob(name + ".annexd-kept-*")
	return slices.ContainsFunc(kept, ok)
}

// appendThrough appends a line to the file a handle was taken on, counted
// as written through name: the name the process looked up. It returns the
// line.
func (s *scribe) appendThrough(handle, name string) (string, error) {
	line := fmt.Sprintf("<line %09d>\n", s.n.Add(1))
	f, err := os.OpenFile(handle, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.written[name] = append(s.written[name], line)
	s.mu.Unlock()
	return line, nil
}

// attackKills: the daemon is SIGKILLed at a random moment of a hardlink
// run, five times a run; while it is down every name of a pair linked or
// inside a step is appended to, and a folder holding a temporary name is
// renamed, or the file system is mounted again through another loop
// device; then it starts again.
func attackKills(t *testing.T, f figures) {
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 1 << 30})
	root := fs.Path("home")
	pairs := *attackPairs
	data := hardlinkTree(t, root, pairs, 2, 256<<10)
	orig := map[uint64]bool{}
	for name := range data {
		if strings.HasSuffix(name, "/c1") {
			orig[stateOf(t, name).ino] = true
		}
	}
	base := dedupBase(t, "")
	d := startOn(t, base, root)
	s := newScribe()
	inStep := 0
	for kill := range 5 {
		// About 70 ms a pair on four workers: the kill lands inside the run.
		spread := time.Duration(max(pairs-linkedPairs(t, data), 1)) * 70 * time.Millisecond / 4
		killDuringHardlink(t, d, spread)
		f["kills"]++
		temps := tempNames(root)
		if len(temps) > 0 {
			f["kills inside a step"]++
			inStep++
		}
		for _, p := range temps {
			if orig[stateOf(t, p).ino] {
				f["kills after an exchange"]++
				break
			}
		}
		switch {
		case len(temps) > 0 && inStep%2 == 1:
			data = renameFolder(t, s, data, filepath.Dir(temps[0]))
			f["folders renamed while down"]++
		case len(temps) > 0 || kill%3 == 2:
			remountOnAnotherDevice(t, fs)
			f["remounts on another device"]++
		}
		// Every name of a pair linked or inside a step is appended to; the
		// others are left alone, still copies for the next run.
		touched := map[string]bool{}
		for _, p := range tempNames(root) {
			touched[filepath.Dir(p)] = true
		}
		for name := range data {
			dir := filepath.Dir(name)
			if touched[dir] || stateOf(t, filepath.Join(dir, "c0")).ino == stateOf(t, filepath.Join(dir, "c1")).ino {
				if err := s.appendLine(name); err != nil {
					t.Errorf("append while the daemon is down: %v", err)
				}
			}
		}
		d = startOn(t, base, root)
		f["temp names left"] += len(tempNames(root))
	}
	if r := d.ctl("", "dedup", "--hardlink"); r.code > 1 {
		t.Errorf("the last run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	a := s.verify(t, root, data)
	f["pairs"] += pairs
	f["lines written"] += s.lines()
	f["lost"] += a.lost + len(a.broken)
	f["misplaced"] += a.misplaced
	f["kept aside"] += a.keptAside
	f["temp names left"] += len(tempNames(root))
	if a.lost+a.misplaced > 0 {
		t.Errorf("%s", a)
	}
}

// renameFolder renames dir while the daemon is down and moves the names
// under it in data and in the scribe's record.
func renameFolder(t *testing.T, s *scribe, data map[string][]byte, dir string) map[string][]byte {
	moved := dir + ".moved"
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for name, b := range data {
		if filepath.Dir(name) == dir {
			name = filepath.Join(moved, filepath.Base(name))
		}
		out[name] = b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, lines := range s.written {
		if filepath.Dir(name) == dir {
			delete(s.written, name)
			s.written[filepath.Join(moved, filepath.Base(name))] = lines
		}
	}
	return out
}

// remountOnAnotherDevice unmounts fs and mounts its image again through
// another loop device, so it shows another st_dev, as after a reboot.
func remountOnAnotherDevice(t *testing.T, fs *loopfs.FS) {
	t.Helper()
	var before, after unix.Stat_t
	if err := unix.Stat(fs.Dir, &before); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(fs.Dir, 0); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	out, err := exec.Command("losetup", "--find", "--show", fs.Image).Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		unix.Unmount(fs.Dir, 0)
		exec.Command("losetup", "-d", dev).Run()
	})
	if err := unix.Mount(dev, fs.Dir, string(fs.Kind), 0, ""); err != nil {
		t.Fatalf("mount %s: %v", dev, err)
	}
	if err := unix.Stat(fs.Dir, &after); err != nil || after.Dev == before.Dev {
		t.Fatalf("the file system kept its device number: %v", err)
	}
}

// attackRefusals: some copies are in append-only folders, some keepers
// immutable, and some folders are made append-only as the run compares
// their copy. Each such pair is refused alone; the next run goes ahead
// while the flags stay; once they go, nothing temporary is left.
func attackRefusals(t *testing.T, f figures) {
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 256 << 20})
	root := fs.Path("home")
	const pairs = 60
	data := hardlinkTree(t, root, pairs, 2, 128<<10)
	var flagged []string
	for g := 0; g < 10; g++ {
		dir := filepath.Join(root, fmt.Sprintf("g%03d", g))
		if g < 5 {
			setFlag(t, dir, fsAppendFL, true)
			flagged = append(flagged, dir)
		} else {
			setImmutable(t, filepath.Join(dir, "c0"), true)
			flagged = append(flagged, filepath.Join(dir, "c0"))
		}
	}
	t.Cleanup(func() {
		for _, p := range flagged {
			setFlag(t, p, fsAppendFL|fsImmutableFL, false)
		}
	})
	d := startOn(t, dedupBase(t, ""), root)
	// Folders g010 to g014 become append-only as the run opens their copy.
	var late []string
	for g := 10; g < 15; g++ {
		late = append(late, filepath.Join(root, fmt.Sprintf("g%03d/c1", g)))
	}
	var first []string
	for g := range pairs / 2 {
		first = append(first, filepath.Join(root, fmt.Sprintf("g%03d", g)))
	}
	r := ctlWhile(t, d, func(stop <-chan struct{}) { flagOnOpen(t, late, stop) }, append([]string{"dedup", "--hardlink"}, first...)...)
	skips := skipsOf(r.stdout)
	f["pairs"] += pairs
	f["refused"] += skips["refused"]
	f["left for recovery"] += len(tempNames(root))
	// The other half, flags still set: nothing may stop it.
	before := linkedPairs(t, data)
	var second []string
	for g := pairs / 2; g < pairs; g++ {
		second = append(second, filepath.Join(root, fmt.Sprintf("g%03d", g)))
	}
	r2 := d.ctl("", append([]string{"dedup", "--hardlink"}, second...)...)
	if stopped := pairs/2 - (linkedPairs(t, data) - before); stopped > 0 {
		t.Errorf("the next run, on other pairs, flags still set: %d of %d pairs not linked; exit %d\n%s%s", stopped, pairs/2, r2.code, r2.stdout, r2.stderr)
		f["pairs stopped by another's refusal"] += stopped
	}
	for _, p := range append(flagged, filepath.Dir(late[0]), filepath.Dir(late[1]), filepath.Dir(late[2]), filepath.Dir(late[3]), filepath.Dir(late[4])) {
		setFlag(t, p, fsAppendFL|fsImmutableFL, false)
	}
	if r := d.ctl("", "dedup", "--hardlink"); r.code > 1 {
		t.Errorf("a run after the flags went: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	f["temp names left"] += len(tempNames(root))
	a := newScribe().verify(t, root, data)
	f["lost"] += a.lost + len(a.broken)
}

// flagOnOpen makes the folder of each of names append-only the first
// time a process opens the name.
func flagOnOpen(t *testing.T, names []string, stop <-chan struct{}) {
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
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if dir, ok := dirs[int(ev.Wd)]; ok {
				delete(dirs, int(ev.Wd))
				setFlagQuiet(dir, fsAppendFL)
			}
		}
	}
}

func setFlagQuiet(path string, flag int) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if flags, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS); err == nil {
		unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, flags|flag)
	}
}

// attackAnnex: a git-annex repository with annex.thin (each file a hard
// link of its object) and a newer copy of each file elsewhere in the
// root, with the default ignores and with [ignore] annex_objects. No copy
// may be linked to an object.
func attackAnnex(t *testing.T, f figures) {
	for _, conf := range []string{"", "[ignore]\nannex_objects = true\n"} {
		fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: 128 << 20})
		root := fs.Path("home")
		repo := filepath.Join(root, "repo")
		os.MkdirAll(repo, 0o755)
		git := func(args ...string) {
			cmd := exec.Command("git", args...)
			cmd.Dir, cmd.Env = repo, gitEnv()
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
		git("init", "-q")
		git("config", "user.email", "e2e@annexd.invalid")
		git("config", "user.name", "e2e")
		git("annex", "init", "-q")
		git("config", "annex.thin", "true")
		git("config", "annex.addunlocked", "true")
		const files = 20
		for i := range files {
			writeRandom(t, filepath.Join(repo, fmt.Sprintf("f%02d.bin", i)), uint64(500+i), 100_000)
		}
		git("annex", "add", "-q", ".")
		for i := range files {
			writeRandom(t, filepath.Join(root, fmt.Sprintf("copies/f%02d.bin", i)), uint64(500+i), 100_000)
		}
		d := startOn(t, dedupBase(t, conf), root)
		d.ctl("", "dedup", "--hardlink")
		for i := range files {
			f["copies"]++
			var st unix.Stat_t
			unix.Lstat(filepath.Join(repo, fmt.Sprintf("f%02d.bin", i)), &st)
			if stateOf(t, filepath.Join(root, fmt.Sprintf("copies/f%02d.bin", i))).ino == st.Ino {
				f["copies linked to an annex object"]++
			}
		}
		git("annex", "fsck", "-q")
		d.stop()
	}
}

// attackBackground: on btrfs in the background mode, a copy in a
// nodatacow folder is refused; copies made afterwards must still share
// their keeper's blocks within 15 s.
func attackBackground(t *testing.T, f figures) {
	fs := loopfs.New(t, loopfs.Btrfs, loopfs.Options{Size: 512 << 20})
	root := fs.Path("home")
	os.MkdirAll(filepath.Join(root, "nocow"), 0o755)
	setFlag(t, filepath.Join(root, "nocow"), fsNoCOWFL, true)
	for i := range 4 {
		writeRandom(t, filepath.Join(root, fmt.Sprintf("k%d.bin", i)), uint64(600+i), 1<<20)
		writeRandom(t, filepath.Join(root, fmt.Sprintf("nocow/k%d.bin", i)), uint64(600+i), 1<<20)
	}
	conf := "[dedup]\ncontinuous = true\nquiet = \"1s\"\ninterval = \"200ms\"\nmax_load = -1.0\nignore_battery = true\n"
	d := startOn(t, dedupBase(t, conf), root)
	deadline := time.Now().Add(time.Minute)
	for st := dedupStatus(t, d); st.Skipped["refused"] < 4 && time.Now().Before(deadline); st = dedupStatus(t, d) {
		time.Sleep(100 * time.Millisecond)
	}
	st := dedupStatus(t, d)
	f["refused pairs"] += int(st.Skipped["refused"])
	for i := range 4 {
		writeRandom(t, filepath.Join(root, fmt.Sprintf("later/a%d.bin", i)), uint64(700+i), 1<<20)
		writeRandom(t, filepath.Join(root, fmt.Sprintf("later/b%d.bin", i)), uint64(700+i), 1<<20)
	}
	start := time.Now()
	// Quiet is 1 s; 15 s more is the bound the issue asked about.
	for st = dedupStatus(t, d); st.Pairs < 4 && time.Since(start) < 16*time.Second; st = dedupStatus(t, d) {
		time.Sleep(100 * time.Millisecond)
	}
	f["later pairs"] += 4
	f["later pairs not shared"] += 4 - int(st.Pairs)
	d.stop()
}
