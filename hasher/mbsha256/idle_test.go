package mbsha256

import (
	"os"
	"runtime/debug"
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
	// Collect the batch's garbage and return it to the OS now, so that
	// neither the collector nor the background scavenger works during the
	// wait.
	debug.FreeOSMemory()
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
	// The least of up to three waits: runtime housekeeping left from the
	// tests before (or another process's load) may spoil one, while a
	// poller spoils them all.
	limit := d / 100
	var used time.Duration
	for i := range 3 {
		used = idleCPU(t, d)
		t.Logf("wait %d: CPU used by the process over %v idle: %v (%.3f %% of a core)", i+1, d, used, 100*used.Seconds()/d.Seconds())
		if used <= limit {
			return
		}
	}
	t.Errorf("idle process used %v of CPU in %v (the least of three waits), more than %v", used, d, limit)
}
