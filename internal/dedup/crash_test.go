package dedup

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
	"github.com/annexd/annexd/internal/testutil"
	"github.com/annexd/annexd/store"
)

// The crash child is this test binary started again with these set: it
// runs one hardlink deduplication of crashRoot over the index crashIndex,
// prints "go" before the first action and "p" after each, then "done",
// and waits to be killed.
const (
	crashIndex = "DEDUP_CRASH_INDEX"
	crashRoot  = "DEDUP_CRASH_ROOT"
	crashStep  = "DEDUP_CRASH_STEP" // "step:n": the child kills itself after the n-th such step
	crashMode  = "DEDUP_CRASH_MODE" // "trash": a trash run instead of a hardlink run
)

// crashSteps are the steps of a relink the child can die after.
var crashSteps = []string{"intent", "linked", "exchanged", "unlinked", "synced"}

func TestMain(m *testing.M) {
	if os.Getenv(crashIndex) != "" {
		if err := crashChild(os.Getenv(crashIndex), os.Getenv(crashRoot)); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(1)
		}
		io.Copy(io.Discard, os.Stdin) // until killed
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func crashChild(index, root string) error {
	if spec := os.Getenv(crashStep); spec != "" {
		step, n, _ := strings.Cut(spec, ":")
		left, _ := strconv.Atoi(n)
		testHookStep = func(s string) {
			if s == step {
				if left--; left == 0 {
					syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
			}
		}
	}
	st, err := store.Open(index, store.Options{})
	if err != nil {
		return err
	}
	go st.Run(context.Background())
	opt := Options{Intents: NewMetaIntents(st)}
	req := Request{PlanOptions: PlanOptions{Mode: Hardlink, Paths: [][]byte{[]byte(root)}}}
	if os.Getenv(crashMode) == "trash" {
		req.Mode, opt.Workers = Trash, 1 // one move at a time: the kill lands in the first
	}
	d := New(st, opt)
	plan, err := d.Plan(context.Background(), req)
	if err != nil {
		return err
	}
	fmt.Println("go")
	req.Progress = func(Progress) { fmt.Println("p") }
	if _, err := d.Apply(context.Background(), plan, req); err != nil {
		return err
	}
	fmt.Println("done")
	return nil
}

// crashTree is the layout of each crash run: groups of four copies in
// several directories, sizes from a few KiB to a few hundred.
func crashTree(run int) map[string][]byte {
	files := map[string][]byte{}
	for g := range 10 {
		data := content(byte(run*16+g), 4096+(g*37_000+run*1013)%300_000)
		for c := range 4 {
			files[fmt.Sprintf("d%d/g%d-c%d", (g+c)%3, g, c)] = data
		}
	}
	return files
}

// testKilled SIGKILLs hardlink runs: runs times at a random moment (after
// a random number of actions, and a random part of the next), and once
// right after each step of a relink, at a random action. Every name must
// exist with its content at every such moment, and after recovery no
// temporary file or intent is left and the index agrees with the files.
func testKilled(t *testing.T, b backend, runs int) {
	fs := loopfs.New(t, b.kind, loopfs.Options{Size: 320 << 20}) // only the file system: each run has its own files and index
	recovered, actionTime := 0, 5*time.Millisecond
	for run := range runs + len(crashSteps) {
		root := fs.Path(fmt.Sprintf("crash%d", run))
		files := crashTree(run)
		for name, data := range files {
			writeFile(t, filepath.Join(root, name), data)
		}
		index := filepath.Join(t.TempDir(), "index.db")
		recordClosed(t, index, root, files)
		actions := len(files) * 3 / 4
		if run < runs {
			actionTime = killChild(t, index, root, "", rnd.IntN(actions+1), time.Duration(rnd.Int64N(int64(actionTime))))
		} else {
			step := fmt.Sprintf("%s:%d", crashSteps[run-runs], 1+rnd.IntN(actions))
			killChild(t, index, root, step, 0, 0)
		}
		for name, data := range files {
			assertContent(t, filepath.Join(root, name), data) // before recovery too: never a missing name
		}
		if recoverClosed(t, index, root, files) > 0 {
			recovered++
		}
		assertNoTemp(t, root)
	}
	t.Logf("%d of %d runs were killed inside a step and recovered", recovered, runs+len(crashSteps))
	if recovered < len(crashSteps) {
		t.Errorf("%d runs left an intent to recover, want at least the %d killed after a step", recovered, len(crashSteps))
	}
}

// recordClosed records the files in a new index and closes it.
func recordClosed(t *testing.T, index, root string, files map[string][]byte) {
	t.Helper()
	withStore(t, index, func(st *store.Store) {
		var wg sync.WaitGroup
		for name := range files {
			wg.Go(func() { record(t, st, filepath.Join(root, name)) })
		}
		wg.Wait()
	})
}

// recoverClosed opens the index, recovers, checks the files and the
// index, and returns how many intents were left to settle.
func recoverClosed(t *testing.T, index, root string, files map[string][]byte) (left int) {
	t.Helper()
	withStore(t, index, func(st *store.Store) {
		ins, err := NewMetaIntents(st).Intents()
		must(t, err)
		left = len(ins)
		d := New(st, Options{Intents: NewMetaIntents(st)})
		if err := d.Recover(context.Background()); err != nil {
			t.Errorf("Recover: %v", err)
		}
		assertNoIntents(t, st)
		for name, data := range files {
			assertContent(t, filepath.Join(root, name), data)
			record(t, st, filepath.Join(root, name)) // the daemon's first scan after a restart
		}
		abs := map[string][]byte{}
		for name, data := range files {
			abs[filepath.Join(root, name)] = data
		}
		assertIndexAgrees(t, st, abs)
	})
	return left
}

func withStore(t *testing.T, index string, fn func(st *store.Store)) {
	t.Helper()
	st, err := store.Open(index, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { st.Run(ctx) })
	fn(st)
	cancel()
	wg.Wait()
	must(t, st.Close())
}

// killChild starts the crash child. With a step it waits for the child
// to kill itself there; otherwise it SIGKILLs the child after `after`
// progress lines and a further delay. It returns the mean time an action
// took, so the next run's delay falls inside an action however loaded
// the machine is.
func killChild(t *testing.T, index, root, step string, after int, delay time.Duration) time.Duration {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashIndex+"="+index, crashRoot+"="+root, crashStep+"="+step)
	if strings.HasPrefix(step, "trash") {
		cmd.Env = append(cmd.Env, crashMode+"=trash")
	}
	stdin, err := cmd.StdinPipe()
	must(t, err)
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	must(t, err)
	var stderr testutil.Buffer
	cmd.Stderr = &stderr
	must(t, cmd.Start())
	lines := bufio.NewScanner(out)
	var start time.Time
	seen := -1 // "go" makes it 0
	for (step != "" || seen < after) && lines.Scan() {
		if lines.Text() == "done" {
			if step != "" {
				cmd.Process.Signal(syscall.SIGKILL)
				cmd.Wait()
				t.Fatalf("the crash child finished without reaching step %s", step)
			}
			break
		}
		if seen++; seen == 0 {
			start = time.Now()
		}
	}
	mean := time.Since(start) / time.Duration(max(seen, 1))
	if step == "" {
		// Not a wait for anything: the kill lands at a random moment of
		// the next action, which is the point of the test.
		time.Sleep(delay)
		cmd.Process.Signal(syscall.SIGKILL)
	}
	io.Copy(io.Discard, out)
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("the crash child (step %q) ended by itself (%v), not by a kill: %s", step, err, stderr.String())
	}
	if seen <= 0 {
		return 5 * time.Millisecond
	}
	return max(mean, time.Millisecond)
}

// A file system shut down in the middle of a relink, the daemon running
// on (an I/O error, a disk gone, XFS shutting itself down): the step's
// names answer EIO. That is no file of someone else's at the temporary
// name: the step stays in the journal, and the recovery after the file
// system is back settles it, leaving no temporary name (it was dropped,
// the old copy left for ever at a hidden name, when EIO counted as a
// foreign file).
func TestStepCutByAShutdownIsLeftForRecovery(t *testing.T) {
	for _, step := range []string{"exchanged", "unlinked"} {
		t.Run(step, func(t *testing.T) { testStepCutByAShutdown(t, step) })
	}
}

func testStepCutByAShutdown(t *testing.T, step string) {
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	root := fs.Path("tree")
	data := content(7, 64<<10)
	files := map[string][]byte{"a/one": data, "a/two": data}
	for name, b := range files {
		writeFile(t, filepath.Join(root, name), b)
	}
	index := filepath.Join(t.TempDir(), "index.db")
	recordClosed(t, index, root, files)
	var cut sync.Once
	testHookStep = func(s string) {
		if s == step {
			cut.Do(func() {
				if step == "exchanged" {
					syncFS(t, root) // the exchange on disk
				}
				fs.Shutdown(t)
			})
		}
	}
	t.Cleanup(func() { testHookStep = nil })
	withStore(t, index, func(st *store.Store) {
		d := New(st, Options{Intents: NewMetaIntents(st)})
		req := Request{PlanOptions: PlanOptions{Mode: Hardlink, Paths: [][]byte{[]byte(root)}}}
		plan, err := d.Plan(context.Background(), req)
		must(t, err)
		res, err := d.Apply(context.Background(), plan, req)
		if err != nil || res.Skipped[SkipError] != 1 {
			t.Errorf("apply: %v, skipped %v; want the step skipped with an error", err, res.Skipped)
		}
	})
	testHookStep = nil
	fs.Unmount(t)
	fs.Mount(t)
	if left := recoverClosed(t, index, root, files); left != 1 {
		t.Errorf("%d steps were left for recovery; want the one cut", left)
	}
	assertNoTemp(t, root)
}

// syncFS flushes the file system that holds path: data, metadata, log.
func syncFS(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	must(t, unix.Syncfs(int(f.Fd())))
}
