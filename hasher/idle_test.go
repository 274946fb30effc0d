package hasher

import (
	"context"
	"encoding/hex"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/key"
)

// A Hasher that has worked and now waits costs no CPU: its workers block on
// channels. Measured as this process's CPU time over an idle window.
func TestIdleHasherUsesNoCPU(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	writeFile(t, path, pattern(1<<20))
	h := New(Policy{InlineMax: -1, Workers: 4, Batch: MultiBuffer}, nil)
	defer h.Close()
	if _, err := h.Hash(context.Background(), path, key.SHA256); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	time.Sleep(50 * time.Millisecond) // let the runtime settle
	// A polling goroutine (sha256-simd's Avx512Server showed 3-20 %) fails
	// this in every window; the Go runtime alone stays well under 1 %. The
	// least of three windows is taken, so that a burst of the runtime's own
	// background work (a GC cycle finishing, the scavenger) on a machine
	// loaded by other tests does not fail it.
	idle := 1.0
	for range 3 {
		w, err := measureIdle(300 * time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		idle = min(idle, w)
	}
	if idle > 0.02 {
		t.Fatalf("idle Hasher used %.1f %% of a core", 100*idle)
	}
	t.Logf("idle CPU: %.2f %% of a core", 100*idle)
}

// Whatever an external program prints, parsing never panics, and what it
// accepts is exactly one lowercase digest in the program's format.
func FuzzExternalParse(f *testing.F) {
	f.Add([]byte("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  -\n"))
	f.Add([]byte("SHA2-256(stdin)= ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n"))
	f.Add([]byte("(stdin)= ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n"))
	f.Add([]byte("\\ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  -\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		for _, k := range []ExternalKind{KindSHA256Sum, KindOpenSSL} {
			d, err := k.parse(out)
			if err != nil {
				continue
			}
			if len(d) != 32 {
				t.Fatalf("%s accepted %q as a %d-byte digest", k, out, len(d))
			}
			var want string
			if k == KindSHA256Sum {
				want = hex.EncodeToString(d) + "  -\n"
			} else {
				want = "(stdin)= " + hex.EncodeToString(d) + "\n"
			}
			if got := string(out); got != want && got != "SHA2-256"+want && got != "SHA256"+want {
				t.Fatalf("%s accepted %q", k, out)
			}
		}
	})
}

// measureIdle returns the CPU this process used during window, as a fraction
// of one core.
func measureIdle(window time.Duration) (float64, error) {
	var before, after unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &before); err != nil {
		return 0, err
	}
	t0 := time.Now()
	time.Sleep(window)
	if err := unix.Getrusage(unix.RUSAGE_SELF, &after); err != nil {
		return 0, err
	}
	wall := time.Since(t0)
	cpu := rusageCPU(&after) - rusageCPU(&before)
	return float64(cpu) / float64(wall), nil
}

func rusageCPU(r *unix.Rusage) time.Duration {
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}
