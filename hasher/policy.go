package hasher

import (
	"fmt"
	"runtime"
	"time"

	"github.com/annexd/annexd/hasher/mbsha256"
)

// Policy decides where a file is hashed. Its zero value works (see the
// defaults on each field); package hasher/calibrate derives one measured here,
// and a config file may override any field.
type Policy struct {
	// InlineMax: files of at most this many bytes are hashed on the caller's
	// goroutine. 0 means DefaultInlineMax; a negative value sends every
	// non-empty file to the pool.
	InlineMax int64 `json:"inline_max" toml:"inline_max"`
	// ExternalMin: SHA-256 files of at least this many bytes are hashed by
	// External. 0 means never.
	ExternalMin int64 `json:"external_min" toml:"external_min"`
	// External is the external program's path (sha256sum or openssl, told
	// apart by base name). Empty means none.
	External string `json:"external,omitempty" toml:"external"`
	// Workers is the pool size; 0 means runtime.NumCPU().
	Workers int `json:"workers" toml:"workers"`
	// BufferSize is the read size in bytes; 0 means DefaultBufferSize.
	BufferSize int `json:"buffer_size" toml:"buffer_size"`
	// ReadAhead: files of at least this many bytes are read by a second
	// goroutine while the first hashes. 0 means DefaultReadAhead, negative
	// never.
	ReadAhead int64 `json:"read_ahead" toml:"read_ahead"`
	// SHA256 picks the in-process SHA-256 code; "" means crypto/sha256.
	SHA256 SHA256Impl `json:"sha256" toml:"sha256"`
	// BatchKernel names the mbsha256 multi-buffer kernel the pool's workers
	// use for large SHA-256 files when Batch is not set; "" means none.
	BatchKernel string `json:"batch_kernel,omitempty" toml:"batch_kernel"`
	// Batch, when set, makes the BatchEngine each pool worker uses to hash
	// several large SHA-256 files at once.
	Batch func() BatchEngine `json:"-" toml:"-"`
	// BatchMin: SHA-256 files of at least this many bytes may go to Batch;
	// 0 means any file the pool takes.
	BatchMin int64 `json:"batch_min" toml:"batch_min"`
	// BatchMinStreams: when fewer files than this are queued for the
	// engine, a worker hashes the next one alone instead; 0 means 2. A
	// file of LargeMin bytes or more goes to the engine all the same: the
	// engine hashes it alone a slice at a time until others join it in
	// the lanes.
	BatchMinStreams int `json:"batch_min_streams" toml:"batch_min_streams"`
	// LargeMin: a batch file of at least this many bytes goes to an
	// engine with free lanes rather than start a second engine half
	// empty, and to the engine even when it comes alone (Hasher.claim).
	// 0 means DefaultLargeMin. Not part of a calibration.
	LargeMin int64 `json:"-" toml:"-"`
	// SmallInline keeps SHA-256 files of up to InlineMax bytes out of the
	// batch engine. Without it, with Batch set, their callers read them
	// into memory and hand the bytes to the engine's lanes: many files
	// hashed at once fill the lanes, and a lone file costs a hand-off.
	SmallInline bool `json:"small_inline,omitempty" toml:"small_inline"`
	// Readers is how many of those small files are read at once from one
	// device; 0 means DefaultReaders.
	Readers int `json:"readers" toml:"readers"`
	// SyncWindow: a file whose ctime is younger than this has its data
	// synced (fdatasync) before its identity is checked after reading, so
	// the digest is of bytes on disk. 0 means durable.DataWindow(); a negative
	// value never syncs (robustness tests that show what the sync guards
	// against). Not part of a calibration.
	SyncWindow time.Duration `json:"-" toml:"-"`
}

// DefaultLargeMin is the size from which a batch file is large (LargeMin):
// the 64 MiB files of bench/large_files.sh are, and in a first scan few
// are. With every file read by the engine counted large, the first scan
// of bench/firstscan_ab.sh measured 2 and 8 % more CPU (under load).
const DefaultLargeMin = 8 << 20

// DefaultInlineMax is the inline cutoff used without calibration.
const DefaultInlineMax = 128 << 10

// DefaultPolicy is what a Hasher uses without calibration: crypto/sha256,
// no external program, one worker per CPU.
func DefaultPolicy() Policy { return Policy{}.withDefaults() }

func (p Policy) withDefaults() Policy {
	if p.InlineMax == 0 {
		p.InlineMax = DefaultInlineMax
	}
	if p.Workers <= 0 {
		p.Workers = runtime.NumCPU()
	}
	if p.BufferSize <= 0 {
		p.BufferSize = DefaultBufferSize
	}
	if p.SHA256 == "" {
		p.SHA256 = SHA256Std
	}
	if p.Batch == nil && p.BatchKernel != "" {
		p.Batch = multiBufferKernel(p.BatchKernel)
	}
	if p.BatchMinStreams <= 0 {
		p.BatchMinStreams = 2
	}
	if p.Readers <= 0 {
		p.Readers = DefaultReaders
	}
	if p.LargeMin <= 0 {
		p.LargeMin = DefaultLargeMin
	}
	return p
}

// Validate reports a Policy a Hasher cannot follow, naming the field.
func (p Policy) Validate() error {
	switch {
	case p.SHA256 == "", p.SHA256 == SHA256Std, p.SHA256 == SHA256SIMD && newSIMD != nil:
	default:
		return fmt.Errorf("hasher: policy sha256 = %q: want %q (or %q in annexd)", p.SHA256, SHA256Std, SHA256SIMD)
	}
	if p.ExternalMin < 0 {
		return fmt.Errorf("hasher: policy external_min = %d: want 0 (never) or a size in bytes", p.ExternalMin)
	}
	if p.ExternalMin > 0 {
		if p.External == "" {
			return fmt.Errorf("hasher: policy external_min = %d but no external program is set", p.ExternalMin)
		}
		if _, err := ExternalKindOf(p.External); err != nil {
			return err
		}
	}
	if p.BatchKernel != "" && !validKernel(p.BatchKernel) {
		return fmt.Errorf("hasher: policy batch_kernel = %q: this machine runs %q", p.BatchKernel, mbsha256.Kernels())
	}
	if p.BufferSize < 0 || p.BufferSize > 64<<20 {
		return fmt.Errorf("hasher: policy buffer_size = %d: want 0 (default) up to 64 MiB", p.BufferSize)
	}
	return nil
}

// route is where one file is hashed.
type route uint8

const (
	routeInline route = iota
	routePool
	routeExternal
	routeBatch
)

func (p Policy) route(size int64, sha256 bool) route {
	switch {
	case size == 0 || (p.InlineMax >= 0 && size <= p.InlineMax):
		return routeInline
	case sha256 && p.ExternalMin > 0 && size >= p.ExternalMin:
		return routeExternal
	case sha256 && p.Batch != nil && size >= p.BatchMin:
		return routeBatch
	}
	return routePool
}
