package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/annexd/annexd/internal/testutil"
)

const (
	crashEnvIndex = "ANNEXD_STORE_CRASH_INDEX"
	crashEnvDefer = "ANNEXD_STORE_CRASH_DEFER"
	crashEnvSeed  = "ANNEXD_STORE_CRASH_SEED"
	crashWindow   = 512 // changes in flight in the child
	crashPaths    = 200
)

func TestMain(m *testing.M) {
	if path := os.Getenv(migrateEnvIndex); path != "" {
		migrateChild(path)
		os.Exit(0)
	}
	if path := os.Getenv(crashEnvIndex); path != "" {
		seed, _ := strconv.ParseUint(os.Getenv(crashEnvSeed), 10, 64)
		crashChild(path, seed, os.Getenv(crashEnvDefer) != "")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// crashPlan returns the i-th change of the deterministic stream for seed.
type crashPlan struct{ r *rand.Rand }

func newCrashPlan(seed uint64) *crashPlan { return &crashPlan{rand.New(rand.NewPCG(seed, 99))} }

func (cp *crashPlan) next(i int) Change {
	dir := fmt.Sprintf("/crash/d%d", cp.r.IntN(8))
	path := []byte(fmt.Sprintf("%s/f%d", dir, cp.r.IntN(crashPaths/8)))
	switch n := cp.r.IntN(100); {
	case n < 70:
		content := cp.r.IntN(50)
		r := rec(strconv.Itoa(content), int64(content*10), 1, uint64(cp.r.IntN(400)))
		r.Generation = uint64(i)
		return Change{Op: OpPut, Path: path, Record: r}
	case n < 80:
		return Change{Op: OpDelete, Path: path}
	case n < 90:
		to := fmt.Sprintf("/crash/d%d/f%d", cp.r.IntN(8), cp.r.IntN(crashPaths/8))
		return Change{Op: OpMove, Path: path, NewPath: []byte(to)}
	case n < 95:
		return Change{Op: OpDeleteSubtree, Path: []byte(dir)}
	default:
		to := fmt.Sprintf("/crash/d%d", cp.r.IntN(8))
		return Change{Op: OpMove, Path: []byte(dir), NewPath: []byte(to)}
	}
}

// crashOptions are the child's. With the defaults, groups of 512 defer
// their digest entries and the merges wait; deferred, every group defers
// and merges of a few transactions run often, so kills also land in the
// middle of merges.
func crashOptions(deferred bool) Options {
	if !deferred {
		return Options{}
	}
	return Options{deferAt: 1, mergeAt: 48, mergeTx: 8}
}

// crashChild writes the plan's changes forever, printing "ack N" once
// change N is durable, until it is killed.
func crashChild(path string, seed uint64, deferred bool) {
	s, err := Open(path, crashOptions(deferred))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	go func() { _ = s.Run(context.Background()) }()
	out := bufio.NewWriter(os.Stdout)
	acks := make(chan int, crashWindow)
	sem := make(chan struct{}, crashWindow)
	go func() {
		for n := range acks {
			fmt.Fprintf(out, "ack %d\n", n)
			if len(acks) == 0 {
				out.Flush()
			}
		}
	}()
	cp := newCrashPlan(seed)
	for i := 0; ; i++ {
		c := cp.next(i)
		if c.Op == OpMove && (under(string(c.NewPath), string(c.Path)) || under(string(c.Path), string(c.NewPath))) {
			c = Change{Op: OpDelete, Path: c.Path}
		}
		sem <- struct{}{}
		s.Submit(c, func(err error) {
			if err != nil && !errors.Is(err, ErrNotFound) {
				fmt.Fprintln(os.Stderr, "child change:", err)
				os.Exit(4)
			}
			acks <- i
			<-sem
		})
	}
}

// applyModel applies change c to m as the store does.
func applyModel(m model, c Change) {
	switch c.Op {
	case OpPut:
		m[string(c.Path)] = c.Record
	case OpDelete:
		delete(m, string(c.Path))
	case OpDeleteSubtree:
		m.deleteSubtree(string(c.Path))
	case OpMove:
		_ = m.move(string(c.Path), string(c.NewPath))
	}
}

// TestCrashSafety kills a writing child at random moments and checks that
// the index opens, passes bbolt's check and the invariants, and holds
// exactly a prefix of the changes that includes every acknowledged one.
func TestCrashSafety(t *testing.T) {
	t.Run("defaults", func(t *testing.T) { crashSafety(t, false) })
	t.Run("small merges", func(t *testing.T) { crashSafety(t, true) })
}

func crashSafety(t *testing.T, deferred bool) {
	path := filepath.Join(t.TempDir(), "index.db")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	// 8 kills in the test command, 24 in .ci/run.
	kills := testutil.Runs(8, 24)
	left := 0 // kills that left digest entries pending
	defer func() {
		t.Logf("%d of %d kills left digest entries pending", left, kills)
		if deferred && left == 0 && !t.Failed() {
			t.Error("no kill left digest entries pending: the merge after a crash went untested")
		}
	}()
	for k := range kills {
		seed := uint64(k + 1)
		delay := time.Duration(20+rng.IntN(250)) * time.Millisecond
		acked := runAndKill(t, path, seed, delay, deferred)
		if verifyAfterCrash(t, path, seed, acked) {
			left++
		}
		if t.Failed() {
			t.Fatalf("after kill %d (seed %d, killed after %v, %d acknowledged)", k, seed, delay, acked+1)
		}
		// Each round starts from the last one's state: the plan of the
		// next seed is applied on top, so clear it.
		clearIndex(t, path)
	}
}

func runAndKill(t *testing.T, path string, seed uint64, after time.Duration, deferred bool) int {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnvIndex+"="+path, crashEnvSeed+"="+strconv.FormatUint(seed, 10))
	if deferred {
		cmd.Env = append(cmd.Env, crashEnvDefer+"=1")
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan int, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var n int
			if _, err := fmt.Sscanf(sc.Text(), "ack %d", &n); err == nil {
				lines <- n
			}
		}
	}()
	// Wait for the first acknowledgement, so every round writes.
	acked := -1
	if n, ok := <-lines; ok {
		acked = n
	}
	time.Sleep(after)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	for n := range lines {
		acked = max(acked, n)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v; stderr: %s", err, stderr.String())
	}
	if acked < 0 {
		t.Fatalf("child acknowledged nothing; stderr: %s", stderr.String())
	}
	return acked
}

// verifyAfterCrash reports whether the child left digest entries pending.
func verifyAfterCrash(t *testing.T, path string, seed uint64, acked int) (pending bool) {
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open after kill: %v", err)
	}
	defer s.Close()
	pending = s.Ungrouped() > 0
	mustCheck(t, s)
	got := model{}
	if err := s.Subtree(context.Background(), []byte("/"), func(p []byte, r Record) error {
		got[string(p)] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The committed changes are a prefix 0..L-1 with L > acked; find it.
	m := model{}
	cp := newCrashPlan(seed)
	for i := 0; i <= acked+4*crashWindow; i++ {
		c := cp.next(i)
		if c.Op == OpMove && (under(string(c.NewPath), string(c.Path)) || under(string(c.Path), string(c.NewPath))) {
			c = Change{Op: OpDelete, Path: c.Path}
		}
		applyModel(m, c)
		if i >= acked && sameModel(m, got) {
			groupsAfterCrash(t, s, got)
			return pending
		}
	}
	t.Errorf("index (%d records) is not the result of any prefix of the changes that includes the %d acknowledged", len(got), acked+1)
	return pending
}

// groupsAfterCrash merges what a killed child left pending and checks the
// groups against the records.
func groupsAfterCrash(t *testing.T, s *Store, got model) {
	t.Helper()
	if err := s.Settle(context.Background()); err != nil {
		t.Fatalf("merge after kill: %v", err)
	}
	mustCheck(t, s)
	want, wasted := wantDups(got)
	gotDups, st := dupsOf(t, s)
	if fmt.Sprint(gotDups) != fmt.Sprint(want) || st.Duplicate != wasted || st.Ungrouped != 0 {
		t.Errorf("after kill and merge: Dups %v, %+v; want %v, wasted %d", gotDups, st, want, wasted)
	}
}

func sameModel(a, b model) bool {
	if len(a) != len(b) {
		return false
	}
	for p, r := range a {
		o, ok := b[p]
		if !ok || !o.Equal(&r) {
			return false
		}
	}
	return true
}

func clearIndex(t *testing.T, path string) {
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}
