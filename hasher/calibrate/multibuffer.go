package calibrate

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/annexd/annexd/hasher/mbsha256"
)

// KindBatch is a multi-buffer kernel, measured with all its lanes busy on
// one goroutine.
const KindBatch = "batch"

// batchPerLane is how much each lane hashes in the throughput measurement.
const batchPerLane = 512 << 10

// batchWin is how much faster, on buffers in memory, a multi-buffer kernel
// must be than the chosen single-stream SHA-256 to be used: reading the
// files from the page cache costs the same either way and narrows the gap.
const batchWin = 1.25

// measureMultiBuffer checks every multi-buffer kernel this CPU runs on the
// known answers and on mixed lengths against crypto/sha256, then measures
// each with full lanes.
func measureMultiBuffer(ctx context.Context) []Candidate {
	var out []Candidate
	for _, name := range mbsha256.Kernels() {
		if name == mbsha256.Generic {
			continue // crypto/sha256 one stream at a time: measured already
		}
		c := Candidate{Name: "mbsha256 " + name, Kind: KindBatch}
		e, err := mbsha256.NewKernel(name)
		if err != nil {
			c.Rejected = err.Error()
			out = append(out, c)
			continue
		}
		c.Lanes = e.Lanes()
		c.Verified = verifyMultiBuffer(e)
		switch {
		case !c.Verified:
			c.Rejected = "failed the known-answer vectors"
		case ctx.Err() != nil:
			c.Rejected = errOverBudget.Error()
		default:
			inputs := make([][]byte, e.Lanes())
			for i := range inputs {
				inputs[i] = pattern(batchPerLane + i)
			}
			d := bestCPU(3, func() { e.SumMany(inputs) })
			c.MBps = mbps(int64(e.Lanes())*batchPerLane, d)
		}
		out = append(out, c)
	}
	return out
}

// verifyMultiBuffer runs the known answers through the kernel in one batch,
// then a batch of mixed lengths (lanes finishing at different times)
// compared with crypto/sha256.
func verifyMultiBuffer(e *mbsha256.Engine) bool {
	vs := sha256Vectors()
	inputs := make([][]byte, len(vs))
	for i, v := range vs {
		inputs[i] = v.data
	}
	for i, sum := range e.SumMany(inputs) {
		if hex.EncodeToString(sum[:]) != vs[i].hex {
			return false
		}
	}
	var mixed [][]byte
	for i := range 2*e.Lanes() + 3 {
		mixed = append(mixed, pattern(i*i*97%(200<<10)+i))
	}
	for i, sum := range e.SumMany(mixed) {
		if sum != sha256.Sum256(mixed[i]) {
			return false
		}
	}
	return true
}

// kernelWin is how much faster than a kernel with fewer lanes a
// multi-buffer kernel must measure to be chosen. On the AMD EPYC benchmark
// machine avx512x16 measured 0.90-1.16× shanix2 on buffers in memory (more
// under the shared overload, whose sha256sum loop shares the SHA unit),
// yet ran first scans 6 % slower (BENCHMARKS.md): the narrower kernel pays
// from fewer busy lanes and holds fewer files in memory, and a lead of a
// few tens of per cent in memory does not survive the reads. A margin
// this wide also keeps the choice the same from one start to the next.
const kernelWin = 1.5

// chooseBatch picks the verified multi-buffer kernel that is fastest by
// kernelWin, weighing them from the fewest lanes up, when it beats the
// chosen single-stream implementation by batchWin, marks the others
// rejected, and returns its name or "".
func chooseBatch(c *Calibration, single float64) string {
	var order []int // the usable kernels, fewest lanes first
	for i, x := range c.Candidates {
		if x.Kind == KindBatch && x.Verified && x.Rejected == "" {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(c.Candidates[i].Lanes, c.Candidates[j].Lanes) })
	bestIdx := -1
	for _, i := range order {
		if bestIdx < 0 || c.Candidates[i].MBps >= kernelWin*c.Candidates[bestIdx].MBps {
			bestIdx = i
		}
	}
	var chosen string
	for i := range c.Candidates {
		x := &c.Candidates[i]
		if x.Kind != KindBatch || x.Rejected != "" {
			continue
		}
		switch {
		case i == bestIdx && single > 0 && x.MBps >= batchWin*single:
			x.Chosen = true
			chosen = x.Name[len("mbsha256 "):]
			c.note("batch_kernel = %s: %.0f MB/s with all lanes busy on one core, %.2f× single-stream %.0f MB/s (needs %.2f×)",
				chosen, x.MBps, x.MBps/single, single, batchWin)
		case i == bestIdx:
			x.Rejected = fmt.Sprintf("%.2f× single-stream SHA-256 (%.0f vs %.0f MB/s), below the %.2f× that pays for batching", x.MBps/single, x.MBps, single, batchWin)
			c.note("batch_kernel = none: the fastest multi-buffer kernel is %.2f× single-stream SHA-256, below %.2f×", x.MBps/single, batchWin)
		case bestIdx >= 0 && x.MBps > c.Candidates[bestIdx].MBps:
			x.Rejected = fmt.Sprintf("not %.0f %% faster than %s, which has fewer lanes", 100*(kernelWin-1), c.Candidates[bestIdx].Name)
		default:
			x.Rejected = fmt.Sprintf("slower than %s", c.Candidates[bestIdx].Name)
		}
	}
	return chosen
}
