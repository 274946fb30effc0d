package calibrate

import (
	"fmt"
	"math/bits"

	"github.com/annexd/annexd/hasher"
)

// simdWin is how much faster than crypto/sha256 sha256-simd must hash to
// be chosen: the standard library wins ties and near-ties, so a noisy
// machine does not flip the choice between starts. Both run SHA-NI where
// the CPU has it, and under the shared overload one calibration in ten
// measured sha256-simd more than 10 % ahead.
const simdWin = 1.25

// chooseImpl picks sha256-simd only when it passed the known answers and
// hashed simdWin times as fast as crypto/sha256, and marks the verdicts.
func chooseImpl(std, simd *Candidate) hasher.SHA256Impl {
	if !simd.Verified || simd.MBps < simdWin*std.MBps {
		if simd.Rejected == "" {
			simd.Rejected = fmt.Sprintf("not %.0f %% faster than crypto/sha256 (%.0f vs %.0f MB/s)", 100*(simdWin-1), simd.MBps, std.MBps)
		}
		simd.Chosen = false
		return hasher.SHA256Std
	}
	std.Chosen, std.Rejected = false, fmt.Sprintf("slower than sha256-simd (%.0f vs %.0f MB/s)", std.MBps, simd.MBps)
	return hasher.SHA256SIMD
}

// bufferWin is how much faster a larger read size must be to be chosen
// over a smaller one: the sizes measured differ by 1-2 % on a quiet
// machine, and by 12 % in one calibration in ten under the shared
// overload, so only a real difference moves the choice.
const bufferWin = 1.25

// bestBuffer is the smallest read size within bufferWin of the fastest:
// less memory per worker for no measurable loss.
func bestBuffer(bs []BufferCost) BufferCost {
	var top float64
	for _, x := range bs {
		top = max(top, x.MBps)
	}
	for _, x := range bs { // ascending sizes
		if x.MBps*bufferWin >= top {
			return x
		}
	}
	return BufferCost{Size: hasher.DefaultBufferSize}
}

// The inline cutoff keeps the pool hand-off under this share of a file's
// hashing time.
const handoffShare = 0.05

// derive fills in c.Policy and c.Notes from the measurements. It is pure, so
// it can be tested on made-up figures.
func derive(c *Calibration, impl hasher.SHA256Impl) {
	p := hasher.Policy{SHA256: impl}
	buf := bestBuffer(c.Buffers)
	p.BufferSize = buf.Size
	fileMBps := buf.MBps
	if std, ok := c.Candidate(NameStd); ok {
		c.note("sha256 = %s: crypto/sha256 %s on a buffer in memory, the known answers passed", impl, rate(std))
	}
	if simd, ok := c.Candidate(NameSIMD); ok {
		c.note("sha256-simd %s (chosen only when %.0f %% faster)", rate(simd), 100*(simdWin-1))
	}
	if len(c.Buffers) > 0 {
		c.note("buffer_size = %s: the smallest read size within %.0f %% of the fastest hashing the %s sample file (%.0f MB/s)", sizeStr(int64(buf.Size)), 100*(bufferWin-1), sizeStr(sampleSize), fileMBps)
	} else {
		c.note("buffer_size = %s: default, read sizes not measured", sizeStr(int64(buf.Size)))
	}

	if len(c.PerFile) == 0 || fileMBps <= 0 {
		p.InlineMax = hasher.DefaultInlineMax
		c.note("inline_max = %s: default, the pool hand-off or the file throughput was not measured", sizeStr(p.InlineMax))
	} else if c.HandoffUs < minHandoffUs {
		p.InlineMax = hasher.DefaultInlineMax
		c.note("inline_max = %s: default, the pool hand-off measured %.1f µs, less than a hand-off can cost (noise)", sizeStr(p.InlineMax), c.HandoffUs)
	} else {
		p.InlineMax = inlineMax(c.HandoffUs, fileMBps)
		c.note("inline_max = %s: the pool hand-off (%.1f µs of CPU per file) is under %.0f %% of hashing any larger file at %.0f MB/s (the default %s unless that size is %d× off it)",
			sizeStr(p.InlineMax), c.HandoffUs, 100*handoffShare, fileMBps, sizeStr(hasher.DefaultInlineMax), inlineBand)
	}

	single, _ := c.Candidate(string(impl))
	p.BatchKernel = chooseBatch(c, single.MBps)
	inFileMBps := fileMBps
	if batch, ok := c.Candidate("mbsha256 " + p.BatchKernel); ok && p.BatchKernel != "" {
		inFileMBps = batchFromFile(batch.MBps, single.MBps, fileMBps)
		c.note("in-process hashing from a file with the %s lanes busy: %.0f MB/s per core (%.0f MB/s in memory, plus the read cost that single-stream hashing from a file measured)",
			p.BatchKernel, inFileMBps, batch.MBps)
	}
	var inOverheadUs float64
	if len(c.PerFile) > 0 {
		inOverheadUs = c.PerFile[0].InlineUs
	}
	p.ExternalMin, p.External = chooseExternal(c, inFileMBps, inOverheadUs, p.InlineMax)
	switch {
	case p.ExternalMin != 0:
	case fileMBps <= 0:
		c.note("external_min = never: in-process hashing from a file was not measured, so no external program could be shown to win")
	default:
		c.note("external_min = never: no external program hashes faster than in-process (%.0f MB/s from a file)", inFileMBps)
	}
	p.Workers = c.Fingerprint.NumCPU
	c.note("workers = %d: one per CPU", p.Workers)
	c.Policy = p
}

// rate is a candidate's measured throughput for a note.
func rate(x Candidate) string {
	if x.MBps <= 0 {
		return "not measured"
	}
	return fmt.Sprintf("%.0f MB/s", x.MBps)
}

func (c *Calibration) note(format string, args ...any) {
	c.Notes = append(c.Notes, fmt.Sprintf(format, args...))
}

// inlineBand: the inline cut-off leaves DefaultInlineMax only for one at
// least this many times larger or smaller. Hand-offs of 1-5 µs, which
// load moves by 2-4× from one start to the next, all keep the default.
const inlineBand = 8

// minHandoffUs is taken as the least a pool hand-off can cost: two channel
// operations and two goroutine switches took 1.3-2.5 µs of CPU in every
// other calibration on the benchmark machine (BENCHMARKS.md). A smaller
// figure is noise (one start under load measured 0.0 µs, which chose 16
// KiB), so it keeps DefaultInlineMax.
const minHandoffUs = 0.5

// inlineMax is the largest power of two whose hashing time is at least
// 1/handoffShare times the hand-off cost, within [16 KiB, 8 MiB], or
// DefaultInlineMax when that is within inlineBand of it or the hand-off
// is under minHandoffUs.
func inlineMax(handoffUs, fileMBps float64) int64 {
	const lo, hi = 16 << 10, 8 << 20
	if fileMBps <= 0 || handoffUs < minHandoffUs {
		return hasher.DefaultInlineMax
	}
	bytes := int64(handoffUs / handoffShare * fileMBps) // µs × MB/s = bytes
	if bytes > hasher.DefaultInlineMax/inlineBand && bytes < hasher.DefaultInlineMax*inlineBand {
		return hasher.DefaultInlineMax
	}
	return min(max(roundUpPow2(bytes), lo), hi)
}

func roundUpPow2(n int64) int64 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len64(uint64(n-1))
}

// batchFromFile is the rate per core of hashing files in a batch kernel's
// lanes (batchMBps on buffers in memory): the single-stream measurements
// in memory (singleMBps) and from a file (fileMBps) give what reading
// costs per byte, which the lanes pay as well. An external program runs
// one stream on a core, so where large files go to the lanes it must beat
// this rate, not single-stream hashing: in a scan, with every lane busy,
// each byte it hashes costs the core more than the lanes would. (A lone
// large file is hashed in one lane, near single-stream speed; its wall
// time is what the external program would save, a few per cent.)
func batchFromFile(batchMBps, singleMBps, fileMBps float64) float64 {
	if batchMBps <= 0 || fileMBps <= 0 {
		return fileMBps
	}
	readUsPerByte := 0.0
	if singleMBps > fileMBps {
		readUsPerByte = 1/fileMBps - 1/singleMBps
	}
	return 1 / (1/batchMBps + readUsPerByte)
}

// chooseExternal marks each verified external program chosen or rejected and
// returns the cutoff from which the fastest one wins, or 0. An external
// program must be 5 % faster than in-process hashing to be considered, and
// wins only above the size where its fork/exec overhead is paid back.
func chooseExternal(c *Calibration, fileMBps, inOverheadUs float64, inlineMax int64) (int64, string) {
	var bestMin int64
	bestIdx := -1
	for i := range c.Candidates {
		x := &c.Candidates[i]
		if x.Kind != KindExternal || !x.Verified || x.Rejected != "" {
			continue
		}
		if fileMBps <= 0 {
			x.Rejected = "not compared: in-process hashing from a file was not measured"
			continue
		}
		if x.MBps < 1.05*fileMBps {
			x.Rejected = fmt.Sprintf("never wins: %.0f MB/s plus %.0f µs per run, in-process does %.0f MB/s plus %.0f µs per file",
				x.MBps, x.OverheadUs, fileMBps, inOverheadUs)
			continue
		}
		// overhead_ext + S/ext < overhead_in + S/in  ⇔  S > Δoverhead / (1/in − 1/ext)
		perByteGainUs := 1/fileMBps - 1/x.MBps // µs per byte saved
		cross := int64((x.OverheadUs - inOverheadUs) / perByteGainUs)
		cut := max(roundUpPow2(cross), 1<<20, inlineMax+1)
		c.note("external %s wins from %s: %.0f µs overhead, %.0f MB/s vs in-process %.0f MB/s", x.Name, sizeStr(cut), x.OverheadUs, x.MBps, fileMBps)
		if bestIdx < 0 || cut < bestMin {
			bestIdx, bestMin = i, cut
		}
	}
	if bestIdx < 0 {
		return 0, ""
	}
	for i := range c.Candidates {
		x := &c.Candidates[i]
		if x.Kind == KindExternal && x.Verified && x.Rejected == "" {
			if i == bestIdx {
				x.Chosen = true
			} else {
				x.Rejected = fmt.Sprintf("wins later than %s", c.Candidates[bestIdx].Name)
			}
		}
	}
	c.note("external_min = %s with %s", sizeStr(bestMin), c.Candidates[bestIdx].Path)
	return bestMin, c.Candidates[bestIdx].Path
}

func sizeStr(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
