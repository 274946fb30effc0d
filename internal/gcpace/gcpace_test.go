package gcpace

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake stands for the runtime's collector settings.
type fake struct {
	mu      sync.Mutex
	percent int
	limit   int64
	log     []string
	frees   int
}

func (f *fake) setPercent(p int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.percent
	f.percent = p
	f.log = append(f.log, "gogc")
	return old
}

func (f *fake) setLimit(l int64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.limit
	if l >= 0 {
		f.limit = l
		f.log = append(f.log, "limit")
	}
	return old
}

func (f *fake) free() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frees++
}

func (f *fake) state() (int, int64, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.percent, f.limit, f.frees
}

// run starts Run with f and a busy flag; stop ends it and waits.
func run(f *fake, busy *atomic.Bool) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Options{Busy: busy.Load, Interval: time.Millisecond,
			setPercent: f.setPercent, setLimit: f.setLimit, free: f.free})
	}()
	return func() { cancel(); <-done }
}

func waitFor(t *testing.T, f *fake, what string, ok func(p int, l int64, frees int) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if ok(f.state()) {
			return
		}
	}
	p, l, frees := f.state()
	t.Fatalf("%s: GOGC %d, limit %d, %d frees", what, p, l, frees)
}

func TestRaisedWhileBusyAndBackAfter(t *testing.T) {
	f := &fake{percent: 100, limit: 96 << 20}
	var busy atomic.Bool
	stop := run(f, &busy)
	time.Sleep(20 * time.Millisecond)
	if p, l, _ := f.state(); p != 100 || l != 96<<20 {
		t.Fatalf("idle: GOGC %d, limit %d; want both untouched", p, l)
	}
	busy.Store(true)
	waitFor(t, f, "busy", func(p int, l int64, _ int) bool { return p == DefaultPercent && l == DefaultLimit })
	busy.Store(false)
	waitFor(t, f, "idle again", func(p int, l int64, frees int) bool { return p == 100 && l == 96<<20 && frees == 1 })
	busy.Store(true)
	waitFor(t, f, "busy again", func(p int, l int64, _ int) bool { return p == DefaultPercent && l == DefaultLimit })
	stop()
	if p, l, frees := f.state(); p != 100 || l != 96<<20 || frees != 1 {
		t.Errorf("after Run: GOGC %d, limit %d, %d frees; want 100, %d, 1 (the end of the first busy period)", p, l, frees, 96<<20)
	}
}

// A limit already above Limit (GOMEMLIMIT set high) is never lowered.
func TestHigherLimitKept(t *testing.T) {
	f := &fake{percent: 100, limit: 1 << 30}
	var busy atomic.Bool
	busy.Store(true)
	stop := run(f, &busy)
	waitFor(t, f, "busy", func(p int, _ int64, _ int) bool { return p == DefaultPercent })
	stop()
	if p, l, _ := f.state(); p != 100 || l != 1<<30 {
		t.Errorf("after Run: GOGC %d, limit %d; want 100 and 1 GiB", p, l)
	}
	if slices.Contains(f.log, "limit") {
		t.Errorf("the limit was set (%v); a higher one must stay as it is", f.log)
	}
}

// While Idle says no work runs, Busy is not asked: an idle daemon does
// not wake for the collector's pace. Wake brings the asking back at once.
func TestIdleSleepsUntilWoken(t *testing.T) {
	f := &fake{percent: 100, limit: 96 << 20}
	var asked atomic.Int64
	var idle atomic.Bool
	idle.Store(true)
	var mu sync.Mutex
	wake := make(chan struct{})
	o := Options{Interval: time.Millisecond,
		Busy:       func() bool { asked.Add(1); return !idle.Load() },
		Idle:       idle.Load,
		Wake:       func() <-chan struct{} { mu.Lock(); defer mu.Unlock(); return wake },
		setPercent: f.setPercent, setLimit: f.setLimit, free: f.free}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); Run(ctx, o) }()
	time.Sleep(50 * time.Millisecond)
	if n := asked.Load(); n != 0 {
		t.Fatalf("Busy asked %d times in 50 ms while idle; want none", n)
	}
	idle.Store(false)
	mu.Lock()
	close(wake)
	wake = make(chan struct{})
	mu.Unlock()
	waitFor(t, f, "woken and busy", func(p int, l int64, _ int) bool { return p == DefaultPercent && l == DefaultLimit })
	cancel()
	<-done
	if p, _, _ := f.state(); p != 100 {
		t.Errorf("after Run: GOGC %d, want 100", p)
	}
}
