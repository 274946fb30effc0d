package diskprocs

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
)

func TestGateRaisesAtOnceAndLowersAfterHold(t *testing.T) {
	g := gate{o: Options{Base: 2, High: 4, MinRate: 100, MinShare: 0.25, Hold: 3}}
	steps := []struct {
		rate, share float64
		procs       int
		changed     bool
	}{
		{0, 0, 2, false},
		{99, 1, 2, false},
		{1000, 0.2, 2, false}, // a trickle beside reads from the page cache
		{100, 0.25, 4, true},  // reading from storage: raised at once
		{500, 1, 4, false},
		{0, 0, 4, false}, // one quiet sample
		{200, 0.5, 4, false},
		{0, 0, 4, false},
		{1000, 0.1, 4, false}, // a trickle counts as quiet
		{0, 0, 2, true},       // Hold quiet samples in a row
		{0, 0, 2, false},
	}
	for i, s := range steps {
		procs, changed := g.step(s.rate, s.share)
		if procs != s.procs || changed != s.changed {
			t.Fatalf("step %d (rate %.0f, share %.2f): got %d, %v; want %d, %v", i, s.rate, s.share, procs, changed, s.procs, s.changed)
		}
	}
}

func TestShareOfReads(t *testing.T) {
	last := Reads{Storage: 1000, All: 5000}
	for _, c := range []struct {
		now  Reads
		want float64
	}{
		{Reads{Storage: 1000, All: 9000}, 0},    // all from the page cache
		{Reads{Storage: 2000, All: 9000}, 0.25}, // a quarter from storage
		{Reads{Storage: 9000, All: 9000}, 2},    // read-ahead beyond what was asked
		{Reads{Storage: 1100, All: 5000}, 1},    // faults of a mapping, no read call
		{Reads{Storage: 1000, All: 5000}, 0},    // nothing
	} {
		if got := c.now.share(last); got != c.want {
			t.Errorf("share of %+v since %+v = %v, want %v", c.now, last, got, c.want)
		}
	}
}

// A scan that reads nearly everything from the page cache, and a few pages
// from storage, keeps GOMAXPROCS at Base however fast it reads.
func TestRunIgnoresATrickleFromStorage(t *testing.T) {
	var r Reads
	sets := make(chan int, 16)
	samples := make(chan struct{}, 64)
	o := Options{Base: 2, High: 4, Interval: 5 * time.Millisecond, MinRate: 1 << 20, Hold: 3,
		set: func(n int) int { sets <- n; return 0 },
		readBytes: func() (Reads, error) {
			r.Storage += 2 << 20 // 2 MiB from storage in each sample,
			r.All += 100 << 20   // beside 98 MiB from the page cache
			samples <- struct{}{}
			return r, nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	for range 20 {
		<-samples
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := <-sets; got != 2 {
		t.Fatalf("GOMAXPROCS set to %d during a scan read 2 %% from storage; want it left at 2", got)
	}
	if len(sets) != 0 {
		t.Fatalf("GOMAXPROCS set %d more times", len(sets))
	}
}

// evictedFile writes size bytes to a file on a fresh ext4 image and drops
// its pages from the page cache, so that reading it reads storage: the loop
// device's, wherever the temp dir lies (on tmpfs the page cache would be
// the storage).
// nextSet waits for Run's next change of GOMAXPROCS after what happened,
// a minute at most: a wait that never ends fails the test, not the run.
func nextSet(t *testing.T, sets <-chan int, what string) int {
	t.Helper()
	select {
	case n := <-sets:
		return n
	case <-time.After(time.Minute):
		t.Fatalf("no change of GOMAXPROCS a minute after %s", what)
		return 0
	}
}

func evictedFile(t *testing.T, size int) string {
	t.Helper()
	fs := loopfs.New(t, loopfs.Ext4, loopfs.Options{Size: int64(size) + 64<<20})
	p := fs.Path("cold")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for range size / len(buf) {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	return p
}

func readAll(t *testing.T, p string) {
	t.Helper()
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
}

func TestReadCountsTellStorageFromPageCache(t *testing.T) {
	p := evictedFile(t, 32<<20)
	before, err := ReadCounts()
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, p)
	after, err := ReadCounts()
	if err != nil {
		t.Fatal(err)
	}
	if got := after.Storage - before.Storage; got < 16<<20 {
		t.Fatalf("reading 32 MiB evicted from the page cache counted %d bytes from storage", got)
	}
	if got := after.All - before.All; got < 32<<20 {
		t.Fatalf("reading 32 MiB counted %d bytes read", got)
	}
	before = after
	readAll(t, p) // now from the page cache
	if after, err = ReadCounts(); err != nil {
		t.Fatal(err)
	}
	if got := after.Storage - before.Storage; got > 1<<20 {
		t.Fatalf("reading 32 MiB from the page cache counted %d bytes from storage", got)
	}
	if got := after.All - before.All; got < 32<<20 {
		t.Fatalf("reading 32 MiB from the page cache counted %d bytes read", got)
	}
	if s := after.share(before); s > 1.0/32 {
		t.Fatalf("reading from the page cache: share from storage %.3f", s)
	}
}

// Run raises the count while the process reads from storage and brings it
// back once it stops, then leaves it at Base when it returns.
func TestRunFollowsReadsFromStorage(t *testing.T) {
	p := evictedFile(t, 64<<20)
	sets := make(chan int, 16)
	o := Options{Base: 2, High: 4, Interval: 20 * time.Millisecond, MinRate: 1 << 20, Hold: 3,
		set: func(n int) int { sets <- n; return 0 }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() { // read until told to stop, evicting between reads
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.ReadFile(p) // not readAll: t.Fatal is for the test's goroutine
			f, err := os.Open(p)
			if err != nil {
				return
			}
			unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
			f.Close()
		}
	}()
	if got := nextSet(t, sets, "reads from storage"); got != 4 {
		t.Fatalf("first change while reading from storage: GOMAXPROCS %d, want 4", got)
	}
	close(stop)
	<-stopped // its file closed before the image is unmounted
	if got := nextSet(t, sets, "the reads stopped"); got != 2 {
		t.Fatalf("after the reads stopped: GOMAXPROCS %d, want 2", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A sample between the last check and the cancel may have gone high
	// again (a read-ahead landing late, a busy machine): what counts is
	// the count Run leaves, its last set.
	last := 0
	for len(sets) > 0 {
		last = <-sets
	}
	if last != 2 {
		t.Fatalf("on return: GOMAXPROCS %d, want 2", last)
	}
}

// While Idle says nothing reads, the counts are not sampled: an idle
// daemon does not wake to read /proc/self/io. Wake brings the sampling
// back, and the rates count from the wake, not across the sleep.
func TestRunSleepsWhileIdle(t *testing.T) {
	var mu sync.Mutex
	var r Reads
	reads := 0
	var idle atomic.Bool
	idle.Store(true)
	wake := make(chan struct{})
	sets := make(chan int, 16)
	o := Options{Base: 2, High: 4, Interval: time.Millisecond, MinRate: 1 << 20, Hold: 3,
		Idle: idle.Load,
		Wake: func() <-chan struct{} { mu.Lock(); defer mu.Unlock(); return wake },
		set:  func(n int) int { sets <- n; return 0 },
		readBytes: func() (Reads, error) {
			mu.Lock()
			defer mu.Unlock()
			reads++
			r.Storage += 64 << 20
			r.All += 64 << 20
			return r, nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	n := reads
	mu.Unlock()
	if n != 1 {
		t.Fatalf("counts read %d times in 50 ms while idle; want only the first", n)
	}
	idle.Store(false)
	mu.Lock()
	close(wake)
	wake = make(chan struct{})
	mu.Unlock()
	select {
	case got := <-sets:
		if got != 4 {
			t.Fatalf("GOMAXPROCS set to %d once woken with reads from storage; want 4", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("GOMAXPROCS not raised once woken")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
