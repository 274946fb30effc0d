//go:build storm

// The rename storm: directories renamed, often twice in a row, with files
// created in them at once, among other changes and overflow rescans. Run:
//
//	go test -race -tags storm -run TestRenameStorm -v ./internal/indexer
//
// STORM_RUNS and STORM_OPS set the runs and the operations per run;
// STORM_SEED (default 0) is added to each run's seed, for a longer hunt.

package indexer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func stormSetting(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// TestRenameStorm reports, for every run, how many files the index lost
// once idle; it fails unless that is none.
func TestRenameStorm(t *testing.T) {
	runs := stormSetting(t, "STORM_RUNS", 3)
	ops := stormSetting(t, "STORM_OPS", 1000)
	base := 0
	if os.Getenv("STORM_SEED") != "" {
		base = stormSetting(t, "STORM_SEED", 0)
	}
	var total stormResult
	for run := range runs {
		res := stormRun(t, uint64(base+run+1), ops)
		t.Logf("run %d (seed %d): %d operations, %d directory renames, %d files created right after one, %d overflows (%d injected); lost %d, extra %d, wrong %d",
			run+1, base+run+1, res.ops, res.dirRenames, res.createdAfter, res.overflows, res.injected, res.lost, res.extra, res.wrong)
		total.add(res)
	}
	t.Logf("storm: %d runs, %d operations, %d directory renames, %d files created right after one, %d overflows; lost %d, extra %d, wrong %d",
		runs, total.ops, total.dirRenames, total.createdAfter, total.overflows, total.lost, total.extra, total.wrong)
	if total.lost+total.extra+total.wrong != 0 {
		t.Fatalf("the index does not match the tree once idle: lost %d, extra %d, wrong %d", total.lost, total.extra, total.wrong)
	}
}

type stormResult struct {
	ops, dirRenames, createdAfter, overflows, injected int
	lost, extra, wrong                                 int
}

func (r *stormResult) add(o stormResult) {
	r.ops += o.ops
	r.dirRenames += o.dirRenames
	r.createdAfter += o.createdAfter
	r.overflows += o.overflows
	r.injected += o.injected
	r.lost += o.lost
	r.extra += o.extra
	r.wrong += o.wrong
}

// storm changes one tree at random.
type storm struct {
	t    *testing.T
	rng  *rand.Rand
	root string
	dirs []string // directories that exist, below the parents
	n    int      // names handed out
	res  stormResult
}

var stormParents = []string{"p1", "p2", "p3", "p4"}

func (s *storm) name(prefix string) string {
	s.n++
	return fmt.Sprintf("%s%d", prefix, s.n)
}

func (s *storm) parent() string {
	return filepath.Join(s.root, stormParents[s.rng.IntN(len(stormParents))])
}

func (s *storm) newDir(files int) {
	d := filepath.Join(s.parent(), s.name("d"))
	for range files {
		writeFile(s.t, filepath.Join(d, s.name("f")+".txt"), s.name("content "))
	}
	must(s.t, os.MkdirAll(d, 0o755))
	s.dirs = append(s.dirs, d)
}

func (s *storm) pick() (int, string) {
	i := s.rng.IntN(len(s.dirs))
	return i, s.dirs[i]
}

// renameDir renames a directory once or twice and creates a file in it
// at once, as in "mv p1/d p2/r; mv p2/r p3/s; echo > p3/s/x".
func (s *storm) renameDir() {
	i, d := s.pick()
	times := 1 + s.rng.IntN(2)
	for range times {
		to := filepath.Join(s.parent(), s.name("r"))
		must(s.t, os.Rename(d, to))
		d = to
		s.res.dirRenames++
	}
	s.dirs[i] = d
	if s.rng.IntN(4) != 0 {
		writeFile(s.t, filepath.Join(d, s.name("x")+".txt"), s.name("new "))
		s.res.createdAfter++
	}
}

// burst renames several directories twice each, a file created in each at
// once, and lets the daemon catch up: a script's pace.
func (s *storm) burst() {
	for range 1 + s.rng.IntN(8) {
		i, d := s.pick()
		for range 2 {
			to := filepath.Join(s.parent(), s.name("r"))
			must(s.t, os.Rename(d, to))
			d = to
			s.res.dirRenames++
		}
		s.dirs[i] = d
		writeFile(s.t, filepath.Join(d, s.name("x")+".txt"), "\n")
		s.res.createdAfter++
	}
	time.Sleep(time.Duration(200+s.rng.IntN(400)) * time.Millisecond)
}

// flood creates and removes files in a watched directory while the
// hand-off to the indexer is paused, so that the watcher stops reading and
// its inotify queue overflows (the kernel holds 16,384 events by default).
// On a loaded machine the watcher may drain one flood before it blocks, so
// a flood that overflowed nothing is repeated, up to three times.
func (s *storm) flood(e *env) {
	before := overflows(e)
	for range 3 {
		s.floodOnce(e)
		deadline := time.Now().Add(3 * time.Second)
		for overflows(e) == before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if overflows(e) > before {
			return
		}
	}
}

// overflows counts the inotify queue overflows the watcher has seen.
func overflows(e *env) int {
	n := 0
	for _, r := range e.w.Status().Roots {
		n += int(r.Overflows)
	}
	return n
}

func (s *storm) floodOnce(e *env) {
	e.pause <- true
	k, _ := s.pick()
	for i := range 12000 {
		p := filepath.Join(s.dirs[k], fmt.Sprintf(".flood%d", i))
		must(s.t, os.WriteFile(p, nil, 0o644))
		must(s.t, os.Remove(p))
		if i%500 == 0 {
			s.renameDir() // amid the flood
		}
	}
	e.pause <- false
}

// fileOp creates, rewrites, moves or deletes a file.
func (s *storm) fileOp() {
	_, d := s.pick()
	entries, err := os.ReadDir(d)
	must(s.t, err)
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			files = append(files, filepath.Join(d, e.Name()))
		}
	}
	if len(files) == 0 {
		writeFile(s.t, filepath.Join(d, s.name("f")+".txt"), s.name("content "))
		return
	}
	f := files[s.rng.IntN(len(files))]
	switch s.rng.IntN(4) {
	case 0:
		writeFile(s.t, filepath.Join(d, s.name("f")+".txt"), s.name("content "))
	case 1:
		writeFile(s.t, f, s.name("rewritten "))
	case 2:
		_, to := s.pick()
		must(s.t, os.Rename(f, filepath.Join(to, filepath.Base(f))))
	case 3:
		must(s.t, os.Remove(f))
	}
}

// removeDir deletes a directory with its files, keeping at least a few.
func (s *storm) removeDir() {
	if len(s.dirs) < 8 {
		s.newDir(3)
		return
	}
	i, d := s.pick()
	must(s.t, os.RemoveAll(d))
	s.dirs = append(s.dirs[:i], s.dirs[i+1:]...)
}

// ageAll sets every file's mtime an hour back, so that renames keep
// records instead of hashing files too fresh to trust.
func (s *storm) ageAll() {
	old := time.Now().Add(-time.Hour)
	for _, d := range s.dirs {
		entries, err := os.ReadDir(d)
		must(s.t, err)
		for _, e := range entries {
			must(s.t, os.Chtimes(filepath.Join(d, e.Name()), old, old))
		}
	}
}

func stormRun(t *testing.T, seed uint64, ops int) stormResult {
	root := t.TempDir()
	s := &storm{t: t, rng: rand.New(rand.NewPCG(seed, 9)), root: root}
	for _, p := range stormParents {
		must(t, os.Mkdir(filepath.Join(root, p), 0o755))
	}
	for range 24 {
		s.newDir(4)
	}
	s.ageAll()
	e := newEnv(t, root, envOpts{quiet: 50 * time.Millisecond})
	e.settle(settleTimeout)
	for op := range ops {
		if op == ops/2 {
			s.flood(e)
		}
		switch n := s.rng.IntN(100); {
		case n < 15:
			s.burst()
		case n < 45:
			s.renameDir()
		case n < 85:
			s.fileOp()
		case n < 93:
			s.newDir(1 + s.rng.IntN(4))
		case n < 98:
			s.removeDir()
		default:
			// An inotify queue overflow reaches the indexer as a rescan
			// of the root, amid the other events.
			e.ix.Rescan(root)
			s.res.injected++
		}
		s.res.ops++
		if s.rng.IntN(50) == 0 {
			time.Sleep(time.Duration(s.rng.IntN(300)) * time.Millisecond)
		}
	}
	e.waitIdle(2 * time.Minute)
	m := e.compare()
	s.res.lost, s.res.extra, s.res.wrong = m.lost, m.extra, m.wrong
	for _, r := range e.w.Status().Roots {
		s.res.overflows += r.Overflows
	}
	if s.res.overflows == 0 {
		t.Errorf("seed %d: the floods overflowed no inotify queue", seed)
	}
	s.res.overflows += s.res.injected
	if d := e.diff(); d != "" {
		t.Logf("seed %d: %s", seed, d)
	}
	e.stop()
	return s.res
}

// waitIdle waits until the watcher has read everything and the indexer,
// watcher and hand-off included, is idle.
func (e *env) waitIdle(timeout time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := e.w.Sync(ctx); err != nil {
		e.t.Fatalf("watcher sync: %v", err)
	}
	if err := e.ix.WaitIdle(ctx); err != nil {
		e.t.Fatalf("not idle after %v (progress %+v)", timeout, e.ix.Progress())
	}
}
