package hasher

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"
)

// IdleProbeResult is what RunIdleProbe reports about sha256-simd's
// Avx512Server, measured in a process of its own because the server's
// goroutine can never be stopped.
type IdleProbeResult struct {
	Supported   bool    `json:"supported"`             // the CPU has the AVX-512 it needs
	Verified    bool    `json:"verified"`              // it passed the known answers
	IdleCPU     float64 `json:"idle_cpu"`              // fraction of one core used while idle
	WindowMs    float64 `json:"window_ms"`             // length of the idle window measured
	Unsupported string  `json:"unsupported,omitempty"` // why not, when !Supported
}

// idleWindow is how long the probe watches the idle server.
const idleWindow = 100 * time.Millisecond

// RunIdleProbe starts sha256-simd's Avx512Server, checks it on the known
// answers, lets it sit idle and writes an IdleProbeResult as JSON to w. It
// leaves the server's goroutine running: call it only in a process that exits
// right after (annexd's hidden "calibrate --idle-probe").
func RunIdleProbe(w io.Writer) error {
	res := probeAvx512Server()
	return json.NewEncoder(w).Encode(res)
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

// runIdleProbe runs argv (a command that calls RunIdleProbe) and parses its
// output. The child is killed when ctx (the calibration's budget) ends.
func runIdleProbe(ctx context.Context, argv, env []string) (IdleProbeResult, error) {
	var res IdleProbeResult
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("hasher: idle probe %s: %w", argv[0], err)
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("hasher: idle probe %s printed %q: %w", argv[0], truncate(out, 200), err)
	}
	return res, nil
}
