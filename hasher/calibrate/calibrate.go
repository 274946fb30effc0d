package calibrate

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/annexd/annexd/hasher"
	"github.com/annexd/annexd/key"
)

// calibrationFormat changes whenever what Run measures or how it
// derives the policy changes; stored calibrations of another format are
// redone.
const calibrationFormat = 5

// DefaultBudget is the time Run may take.
const DefaultBudget = time.Second

// Options tell Run where and what to measure. The zero value works.
type Options struct {
	// Dir holds the sample files (removed afterwards); "" means os.TempDir().
	Dir string
	// Programs are the external candidates, names looked up in PATH or
	// paths; nil means sha256sum and openssl.
	Programs []string
	// Budget caps the total time; 0 means DefaultBudget. Steps that do not
	// fit are reported as not measured, and their candidates are not used.
	Budget time.Duration
	Log    *slog.Logger
}

// Calibration is everything Run measured and the Policy it chose. It
// marshals to JSON with stable field names.
type Calibration struct {
	Format int       `json:"format"`
	At     time.Time `json:"at"`
	TookMs float64   `json:"took_ms"`
	// Complete: every step ran within the time budget. A calibration cut
	// short is fit to use but not to keep: StillValid is false for it.
	Complete    bool          `json:"complete"`
	Fingerprint Fingerprint   `json:"fingerprint"`
	Candidates  []Candidate   `json:"candidates"`
	Buffers     []BufferCost  `json:"buffers"`    // read+hash of a sample file by read size
	PerFile     []FileCost    `json:"per_file"`   // whole-file cost, small files
	HandoffUs   float64       `json:"handoff_us"` // pool round trip minus inline, per file
	Policy      hasher.Policy `json:"policy"`
	Notes       []string      `json:"notes"` // how each policy field was derived
}

// Candidate is one way of computing SHA-256 and what was found about it.
type Candidate struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"` // KindInProcess, KindBatch or KindExternal
	Path     string `json:"path,omitempty"`
	Verified bool   `json:"verified"` // passed the known-answer vectors
	// MBps is bytes per second of CPU time, which other load on the
	// machine disturbs far less than wall time: in-process and batch, the
	// thread hashing a buffer in memory; external, the program hashing the
	// sample file on its stdin, less the CPU time of an empty run.
	MBps float64 `json:"mb_per_s,omitempty"`
	// OverheadUs: external, a run over an empty input (fork, exec, exit).
	OverheadUs float64 `json:"overhead_us,omitempty"`
	// Lanes: batch, the streams the kernel hashes at once.
	Lanes    int    `json:"lanes,omitempty"`
	Chosen   bool   `json:"chosen"`
	Rejected string `json:"rejected,omitempty"` // why not chosen
}

// Candidate kinds.
const (
	KindInProcess = "in-process"
	KindExternal  = "external"
)

// The in-process candidates' names.
const (
	NameStd  = string(hasher.SHA256Std)
	NameSIMD = string(hasher.SHA256SIMD)
)

// simdWin is how much faster than crypto/sha256 sha256-simd must hash to
// be chosen: the standard library wins ties and near-ties, so a noisy
// machine does not flip the choice between starts. Both run SHA-NI where
// the CPU has it, and under the shared overload one calibration in ten
// measured sha256-simd more than 10 % ahead.
const simdWin = 1.25

// BufferCost is the in-process throughput, per second of the thread's CPU
// time, reading and hashing the sample file with one read size.
type BufferCost struct {
	Size int     `json:"size"`
	MBps float64 `json:"mb_per_s"`
}

// FileCost is the CPU time of hashing one whole file of Size bytes, stat,
// open and identity checks included.
type FileCost struct {
	Size     int64   `json:"size"`
	InlineUs float64 `json:"inline_us"`
	PoolUs   float64 `json:"pool_us"`
}

// StillValid reports whether c was measured completely, by this program
// version, on this machine, with the external programs as they are now, so
// it can be reused instead of calibrating again. A policy this process
// cannot follow (a kernel GODEBUG turned off) is never reused.
func (c Calibration) StillValid() bool {
	if c.Format != calibrationFormat || !c.Complete || c.Policy.Validate() != nil {
		return false
	}
	names := make([]string, len(c.Fingerprint.Programs))
	for i, p := range c.Fingerprint.Programs {
		names[i] = p.Name
	}
	return c.Fingerprint.Matches(currentFingerprint(context.Background(), names, false))
}

// Candidate returns the candidate called name.
func (c Calibration) Candidate(name string) (Candidate, bool) {
	for _, cand := range c.Candidates {
		if cand.Name == name {
			return cand, true
		}
	}
	return Candidate{}, false
}

// pattern returns n deterministic bytes (the calibration's sample content).
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((i*7 + 3) % 251)
	}
	return b
}

type vector struct {
	data []byte
	hex  string
}

// sha256Vectors are the known answers every candidate must reproduce: the
// empty input, "abc", and a 1 MiB + 1 byte input that spans read buffers and
// ends mid-block (values from an independent implementation).
func sha256Vectors() []vector {
	return []vector{
		{nil, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{[]byte("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{pattern(1<<20 + 1), "e42cda7f3d5f4472e6a826c1ae97c1d3933ba23ef486e8df5814889b7af6f7c4"},
	}
}

// Sample sizes.
const (
	hotSize    = 2 << 20 // in-memory throughput
	sampleSize = 4 << 20 // file throughput, in-process and external
)

var (
	bufferSizes   = []int{256 << 10, 512 << 10, 1 << 20}
	perFileSizes  = []int64{1 << 10, 64 << 10}
	errNoSHA256   = errors.New("hasher: no SHA-256 implementation passed the known-answer vectors")
	errOverBudget = errors.New("not measured: the calibration time budget ran out")
)

// Run measures the candidate ways of hashing on this machine and derives
// a Policy, within opts.Budget (1 s by default).
func Run(ctx context.Context, opts Options) (Calibration, error) {
	start := time.Now()
	if opts.Budget <= 0 {
		opts.Budget = DefaultBudget
	}
	if opts.Programs == nil {
		opts.Programs = []string{"sha256sum", "openssl"}
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, opts.Budget)
	defer cancel()
	dir, err := os.MkdirTemp(opts.Dir, "annexd-calibrate-")
	if err != nil {
		return Calibration{}, fmt.Errorf("hasher: calibrate: %w", err)
	}
	defer os.RemoveAll(dir)
	s, err := writeSamples(dir)
	if err != nil {
		return Calibration{}, fmt.Errorf("hasher: calibrate: %w", err)
	}
	c := Calibration{Format: calibrationFormat, At: start.UTC().Truncate(time.Millisecond)}
	c.Fingerprint = currentFingerprint(ctx, opts.Programs, true)

	std := measureInProcess(ctx, hasher.SHA256Std)
	c.Candidates = append(c.Candidates, std)
	if !std.Verified {
		return c, errNoSHA256
	}
	impl := hasher.SHA256Std
	if hasher.HasSIMD() {
		simd := measureInProcess(ctx, hasher.SHA256SIMD)
		impl = chooseImpl(&std, &simd)
		c.Candidates[len(c.Candidates)-1] = std
		c.Candidates = append(c.Candidates, simd)
	}
	c.Candidates = append(c.Candidates, measureMultiBuffer(ctx)...)
	c.Buffers = measureBuffers(ctx, s, impl)
	c.PerFile, c.HandoffUs = measurePerFile(ctx, s, impl, bestBuffer(c.Buffers))
	for i, prog := range opts.Programs {
		c.Candidates = append(c.Candidates, measureExternal(ctx, prog, c.Fingerprint.Programs[i].Path, s))
	}
	if err := parent.Err(); err != nil {
		return c, err
	}
	c.Complete = ctx.Err() == nil
	derive(&c, impl)
	c.TookMs = ms(time.Since(start))
	log.Info("hasher: calibrated", "took_ms", c.TookMs, "complete", c.Complete, "sha256", c.Policy.SHA256,
		"inline_max", c.Policy.InlineMax, "external_min", c.Policy.ExternalMin, "external", c.Policy.External)
	return c, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

func mbps(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds() / 1e6
}

// samples are the files calibration hashes.
type samples struct {
	vectors []string         // one file per sha256Vectors entry
	small   map[int64]string // perFileSizes
	big     string           // sampleSize bytes
}

func writeSamples(dir string) (samples, error) {
	s := samples{small: map[int64]string{}}
	write := func(name string, data []byte) (string, error) {
		p := filepath.Join(dir, name)
		return p, os.WriteFile(p, data, 0o600)
	}
	for i, v := range sha256Vectors() {
		p, err := write(fmt.Sprintf("vector%d", i), v.data)
		if err != nil {
			return s, err
		}
		s.vectors = append(s.vectors, p)
	}
	for _, n := range perFileSizes {
		p, err := write(fmt.Sprintf("small%d", n), pattern(int(n)))
		if err != nil {
			return s, err
		}
		s.small[n] = p
	}
	var err error
	s.big, err = write("big", pattern(sampleSize))
	return s, err
}

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

// BestExternal returns the verified external program with the highest
// throughput, for a configuration that forces external hashing.
func (c Calibration) BestExternal() (string, bool) {
	var best Candidate
	for _, x := range c.Candidates {
		if x.Kind == KindExternal && x.Verified && x.MBps > best.MBps {
			best = x
		}
	}
	return best.Path, best.Path != ""
}
