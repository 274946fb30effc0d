package calibrate

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"hash"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/key"
)

// best runs f reps times and returns its fastest run: the least disturbed
// by other load on a shared machine.
func best(reps int, f func()) time.Duration {
	var min time.Duration
	for i := 0; i < reps; i++ {
		t0 := time.Now()
		f()
		if d := time.Since(t0); i == 0 || d < min {
			min = d
		}
	}
	return min
}

// bestCPU runs f reps times on one locked OS thread and returns the least
// thread CPU time a run took. CPU time, unlike wall time, barely moves when
// other programs load the machine, which a shared machine's calibration
// needs; it is right for in-process work that runs on the calling thread.
func bestCPU(reps int, f func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var min time.Duration
	for i := 0; i < reps; i++ {
		t0 := threadCPU()
		f()
		if d := threadCPU() - t0; i == 0 || d < min {
			min = d
		}
	}
	return min
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func verifyHash(newH func() hash.Hash) bool {
	for _, v := range sha256Vectors() {
		h := newH()
		h.Write(v.data)
		want, _ := hex.DecodeString(v.hex)
		if !bytes.Equal(h.Sum(nil), want) {
			return false
		}
	}
	return true
}

// measureInProcess checks the in-process SHA-256 impl on the known
// answers and measures it on a buffer in memory, the best of eight runs.
func measureInProcess(ctx context.Context, impl hasher.SHA256Impl) Candidate {
	newH := func() hash.Hash { h, _ := hasher.Policy{SHA256: impl}.NewHash(key.SHA256); return h }
	c := Candidate{Name: string(impl), Kind: KindInProcess, Verified: verifyHash(newH)}
	if !c.Verified {
		c.Rejected = "failed the known-answer vectors"
		return c
	}
	c.Chosen = true
	h, buf := newH(), pattern(hotSize)
	var min time.Duration
	for rep := 0; rep < 8 && ctx.Err() == nil; rep++ {
		d := bestCPU(1, func() {
			h.Reset()
			h.Write(buf)
			h.Sum(nil)
		})
		if min == 0 || d < min {
			min = d
		}
	}
	c.MBps = mbps(hotSize, min)
	return c
}

// measureBuffers hashes the sample file with each read size, taking turns.
func measureBuffers(ctx context.Context, s samples, impl hasher.SHA256Impl) []BufferCost {
	best := make([]time.Duration, len(bufferSizes))
	for rep := 0; rep < 4; rep++ {
		for i, size := range bufferSizes {
			if ctx.Err() != nil {
				break
			}
			var err error
			d := bestCPU(1, func() {
				_, err = hasher.Policy{SHA256: impl, BufferSize: size, ReadAhead: -1, SyncWindow: -1}.HashFile(ctx, s.big, key.SHA256)
			})
			if err == nil && (best[i] == 0 || d < best[i]) {
				best[i] = d
			}
		}
	}
	var out []BufferCost
	for i, size := range bufferSizes {
		if best[i] > 0 {
			out = append(out, BufferCost{Size: size, MBps: mbps(sampleSize, best[i])})
		}
	}
	return out
}

// bestProcessCPU runs f reps times and returns the least CPU time of the
// whole process a run took: f's goroutines may run on other threads (the
// pool's worker), and waiting for a core under load costs no CPU time.
func bestProcessCPU(reps int, f func()) time.Duration {
	var min time.Duration
	for i := 0; i < reps; i++ {
		t0 := processCPUTime()
		f()
		if d := processCPUTime() - t0; i == 0 || d < min {
			min = d
		}
	}
	return min
}

func processCPUTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measurePerFile times whole small files inline and through a one-worker
// pool, in the process's CPU time; the difference at the smallest size is
// the pool's hand-off cost.
func measurePerFile(ctx context.Context, s samples, impl hasher.SHA256Impl, buf BufferCost) ([]FileCost, float64) {
	h := hasher.New(hasher.Policy{InlineMax: -1, Workers: 1, SHA256: impl, BufferSize: buf.Size, SyncWindow: -1}, nil)
	defer h.Close()
	o := hasher.Policy{SHA256: impl, BufferSize: buf.Size, SyncWindow: -1} // inline, as h would
	var out []FileCost
	for _, size := range perFileSizes {
		if ctx.Err() != nil {
			break
		}
		path := s.small[size]
		const n = 40
		var err error // the last failure: a run cut short measures nothing
		inline := bestProcessCPU(5, func() {
			for range n {
				if _, e := o.HashFile(ctx, path, key.SHA256); e != nil {
					err = e
				}
			}
		})
		pool := bestProcessCPU(5, func() {
			for range n {
				if _, e := h.Hash(ctx, path, key.SHA256); e != nil {
					err = e
				}
			}
		})
		if err != nil {
			break
		}
		out = append(out, FileCost{Size: size, InlineUs: us(inline) / n, PoolUs: us(pool) / n})
	}
	if len(out) == 0 {
		return nil, 0
	}
	return out, max(out[0].PoolUs-out[0].InlineUs, 0)
}

func measureExternal(ctx context.Context, name, path string, s samples) Candidate {
	c := Candidate{Name: name, Kind: KindExternal, Path: path}
	if path == "" {
		c.Rejected = "not found in PATH"
		return c
	}
	if _, err := hasher.ExternalKindOf(path); err != nil {
		c.Rejected = err.Error()
		return c
	}
	if ctx.Err() != nil {
		c.Rejected = errOverBudget.Error()
		return c
	}
	var cpu time.Duration // of the last run
	run := func(file string) ([]byte, error) {
		var d []byte
		var err error
		d, cpu, err = hasher.RunExternal(ctx, path, file)
		return d, err
	}
	for i, v := range sha256Vectors() {
		got, err := run(s.vectors[i])
		switch {
		case err != nil && ctx.Err() != nil:
			c.Rejected = errOverBudget.Error()
			return c
		case err != nil:
			c.Rejected = "failed the known-answer vectors: " + err.Error()
			return c
		}
		if hex.EncodeToString(got) != v.hex {
			c.Rejected = fmt.Sprintf("failed the known-answer vectors: printed %x for a %d-byte input, want %s", got, len(v.data), v.hex)
			return c
		}
	}
	c.Verified = true
	if ctx.Err() != nil {
		c.Rejected = errOverBudget.Error()
		return c
	}
	// Overhead in wall time (what a caller waits), throughput in the
	// program's CPU time (steady under other load), the CPU time of an
	// empty run subtracted.
	var idleCPU, bigCPU time.Duration
	overhead := best(3, func() {
		run(s.vectors[0])
		if idleCPU == 0 || cpu < idleCPU {
			idleCPU = cpu
		}
	})
	var runErr error
	best(2, func() {
		_, runErr = run(s.big)
		if bigCPU == 0 || cpu < bigCPU {
			bigCPU = cpu
		}
	})
	if runErr != nil || ctx.Err() != nil {
		c.Rejected = errOverBudget.Error()
		return c
	}
	c.OverheadUs = us(overhead)
	c.MBps = mbps(sampleSize, max(bigCPU-idleCPU, time.Microsecond))
	return c
}
