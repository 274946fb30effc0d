package diskprocs

import (
	"context"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/internal/loopfs"
)

func TestGateRaisesAtOnceAndLowersAfterHold(t *testing.T) {
	g := gate{o: Options{Base: 2, High: 4, MinRate: 100, Hold: 3}}
	steps := []struct {
		rate    float64
		procs   int
		changed bool
	}{
		{0, 2, false},
		{99, 2, false},
		{100, 4, true}, // reading from storage: raised at once
		{500, 4, false},
		{0, 4, false}, // one quiet sample
		{200, 4, false},
		{0, 4, false},
		{0, 4, false},
		{0, 2, true}, // Hold quiet samples in a row
		{0, 2, false},
	}
	for i, s := range steps {
		procs, changed := g.step(s.rate)
		if procs != s.procs || changed != s.changed {
			t.Fatalf("step %d (rate %.0f): got %d, %v; want %d, %v", i, s.rate, procs, changed, s.procs, s.changed)
		}
	}
}

// evictedFile writes size bytes to a file on a fresh ext4 image and drops
// its pages from the page cache, so that reading it reads storage: the loop
// device's, wherever the temp dir lies (on tmpfs the page cache would be
// the storage).
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

func TestReadBytesCountsReadsFromStorage(t *testing.T) {
	p := evictedFile(t, 32<<20)
	before, err := ReadBytes()
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, p)
	after, err := ReadBytes()
	if err != nil {
		t.Fatal(err)
	}
	if got := after - before; got < 16<<20 {
		t.Fatalf("reading 32 MiB evicted from the page cache counted %d bytes from storage", got)
	}
	before = after
	readAll(t, p) // now from the page cache
	if after, _ = ReadBytes(); after-before > 1<<20 {
		t.Fatalf("reading 32 MiB from the page cache counted %d bytes from storage", after-before)
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
	if got := <-sets; got != 4 {
		t.Fatalf("first change while reading from storage: GOMAXPROCS %d, want 4", got)
	}
	close(stop)
	<-stopped // its file closed before the image is unmounted
	if got := <-sets; got != 2 {
		t.Fatalf("after the reads stopped: GOMAXPROCS %d, want 2", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := <-sets; got != 2 {
		t.Fatalf("on return: GOMAXPROCS %d, want 2", got)
	}
}
