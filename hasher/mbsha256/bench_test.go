package mbsha256

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair times the engine and crypto/sha256 (one stream after another) over
// the same inputs in the same loop, so that both see the same machine load,
// and reports both throughputs (per second of the thread's CPU time) and
// their ratio.
func pair(b *testing.B, inputs [][]byte, engine func([][]byte), viaReaders bool) {
	total := 0
	for _, in := range inputs {
		total += len(in)
	}
	// Thread CPU time, not wall time: other processes taking the core
	// do not count against either side.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var te, tc time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := threadCPU(b)
		engine(inputs)
		t1 := threadCPU(b)
		baseline(inputs, viaReaders)
		te += t1 - t0
		tc += threadCPU(b) - t1
	}
	mb := float64(total) * float64(b.N) / 1e6
	b.ReportMetric(mb/te.Seconds(), "engine-MB/s")
	b.ReportMetric(mb/tc.Seconds(), "crypto-MB/s")
	b.ReportMetric(tc.Seconds()/te.Seconds(), "x-crypto")
	b.ReportMetric(0, "ns/op")
}

// onlyReader hides a reader's WriterTo so io.CopyBuffer uses our buffer.
type onlyReader struct{ io.Reader }

// baseline hashes the inputs one after another with crypto/sha256, from
// memory or, like a pool reading files, through a 64 KiB buffer.
func baseline(inputs [][]byte, viaReaders bool) {
	if !viaReaders {
		for _, in := range inputs {
			sha256.Sum256(in)
		}
		return
	}
	buf := make([]byte, ChunkSize)
	for _, in := range inputs {
		h := sha256.New()
		io.CopyBuffer(h, onlyReader{bytes.NewReader(in)}, buf)
		h.Sum(nil)
	}
}

func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

var bigInputs [][]byte

// distinct returns n different random inputs of size bytes each (the big
// ones are made once per process).
func distinct(n, size int) [][]byte {
	if n == 16 && size == 64<<20 {
		if bigInputs == nil {
			bigInputs = distinct(16, 64<<20-1)
			for i := range bigInputs {
				bigInputs[i] = append(bigInputs[i], byte(i))
			}
		}
		return bigInputs
	}
	buf := randomBytes(uint64(size), n*size)
	inputs := make([][]byte, n)
	for i := range inputs {
		inputs[i] = buf[i*size : (i+1)*size : (i+1)*size]
	}
	return inputs
}

func readers(inputs [][]byte) []io.Reader {
	rs := make([]io.Reader, len(inputs))
	for i, in := range inputs {
		rs[i] = bytes.NewReader(in)
	}
	return rs
}

// BenchmarkLarge is the goal shape: 16 streams of 64 MiB on one goroutine,
// from memory (SumMany) and through readers (SumReaders, one 64 KiB copy per
// chunk, as files are read).
func BenchmarkLarge(b *testing.B) {
	for _, name := range Kernels() {
		e, _ := NewKernel(name)
		b.Run(name+"/mem", func(b *testing.B) {
			pair(b, distinct(16, 64<<20), func(in [][]byte) { e.SumMany(in) }, false)
		})
		b.Run(name+"/readers", func(b *testing.B) {
			pair(b, distinct(16, 64<<20), func(in [][]byte) { e.SumReaders(context.Background(), readers(in)) }, true)
		})
	}
}

// BenchmarkShapes covers small messages: n streams of one size.
func BenchmarkShapes(b *testing.B) {
	for _, name := range Kernels() {
		e, _ := NewKernel(name)
		for _, size := range []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20} {
			for _, n := range []int{16, 64} {
				inputs := distinct(n, size)
				b.Run(fmt.Sprintf("%s/%dx%dKiB/mem", name, n, size>>10), func(b *testing.B) {
					pair(b, inputs, func(in [][]byte) { e.SumMany(in) }, false)
				})
				b.Run(fmt.Sprintf("%s/%dx%dKiB/readers", name, n, size>>10), func(b *testing.B) {
					pair(b, inputs, func(in [][]byte) { e.SumReaders(context.Background(), readers(in)) }, true)
				})
			}
		}
	}
}

// BenchmarkBusyLanes measures the kernel with only some lanes busy (no
// handing over to crypto/sha256), which is what the drain threshold
// (kernel.minLanes) is set from: below the lane count where x-crypto drops
// under 1, finishing streams one by one is faster.
func BenchmarkBusyLanes(b *testing.B) {
	for _, k := range kernels() {
		if !k.have {
			continue
		}
		for n := 1; n <= k.lanes; n++ {
			inputs := distinct(n, 8<<20)
			b.Run(fmt.Sprintf("%s/%d", k.name, n), func(b *testing.B) {
				e := newEngine(k)
				e.minLanes = 0
				pair(b, inputs, func(in [][]byte) { e.SumMany(in) }, false)
			})
		}
	}
}
