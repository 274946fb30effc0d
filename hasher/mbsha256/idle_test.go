package mbsha256

import (
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func processCPU(t testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// idleCPU holds a used Engine idle for d and returns the CPU time the whole
// process spent meanwhile (the Go runtime's own housekeeping included).
func idleCPU(t testing.TB, d time.Duration) time.Duration {
	e := New()
	e.SumMany(distinct(32, 100<<10))
	runtime.GC() // let no collection of the batch's garbage run during the wait
	before := processCPU(t)
	time.Sleep(d)
	used := processCPU(t) - before
	e.SumMany([][]byte{nil}) // keep e alive across the sleep
	return used
}

// TestIdleEngineUsesNoCPU checks that an Engine left idle after a batch
// costs nothing: it has no goroutine or timer, so over a second the process
// uses no more than scheduler noise (a poller at 1 µs would use most of a
// core). MBSHA256_IDLE_SECONDS lengthens the wait for a manual measurement.
func TestIdleEngineUsesNoCPU(t *testing.T) {
	d := time.Second
	if s := os.Getenv("MBSHA256_IDLE_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("MBSHA256_IDLE_SECONDS=%q: %v", s, err)
		}
		d = time.Duration(n) * time.Second
	}
	used := idleCPU(t, d)
	t.Logf("CPU used by the process over %v idle: %v (%.3f %% of a core)", d, used, 100*used.Seconds()/d.Seconds())
	if limit := d / 100; used > limit {
		t.Errorf("idle process used %v of CPU in %v, more than %v", used, d, limit)
	}
}
