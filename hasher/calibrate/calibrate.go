package calibrate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/annexd/annexd/hasher"
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
